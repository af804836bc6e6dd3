"""The identities the sink log and the records carry, decided by ``onceproof/job.py`` without Spark or
Kafka: the sink id stored per checkpoint, the driver incarnation from the environment, and the size of
the transactional-id pool from the input topic's metadata."""

import re
import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceproof import job
from onceproof.pipeline import identity


def test_default_sink_id_is_stable_per_checkpoint_and_new_for_a_fresh_one(tmp_path):
    a, b = tmp_path / "run1" / "checkpoint", tmp_path / "run2" / "checkpoint"
    first = job.default_sink_id(a, "onceproof-eos")
    assert re.fullmatch(r"onceproof-eos-[0-9a-f]{8}", first)
    assert (a / job.SINK_ID_FILE).read_text().strip() == first  # the directory was created
    assert job.default_sink_id(a, "onceproof-eos") == first      # a restarted driver: same id
    assert job.default_sink_id(a, "other-prefix") == first       # the stored id wins
    second = job.default_sink_id(b, "onceproof-eos")
    assert second != first                                       # a fresh checkpoint: a new id
    assert not [p for p in a.iterdir() if p.name != job.SINK_ID_FILE]  # no temporary files left


def test_default_sink_id_concurrent_callers_agree(tmp_path):
    ck = tmp_path / "checkpoint"
    got, start = [], threading.Barrier(8)

    def call():
        start.wait()
        got.append(job.default_sink_id(ck, "p"))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and len(got) == 8


def test_default_sink_id_rejects_an_empty_file(tmp_path):
    (tmp_path / job.SINK_ID_FILE).write_text("\n")
    with pytest.raises(ValueError):
        job.default_sink_id(tmp_path, "p")


def test_sink_id_flag_is_optional(tmp_path):
    args = job.parse_args(["--bootstrap", "b:1", "--checkpoint", str(tmp_path / "ck"), "--sink", "eos"])
    assert args.sink_id is None and args.pool_size is None
    sid = job.resolve_sink_id(args)
    assert sid.startswith("onceproof-eos-") and sid == job.default_sink_id(tmp_path / "ck", "x")
    args = job.parse_args(["--bootstrap", "b:1", "--checkpoint", str(tmp_path / "ck"), "--sink-id", "given"])
    assert job.resolve_sink_id(args) == "given"


def test_driver_incarnation_from_the_environment():
    assert job.driver_incarnation({}) == "0"
    assert job.driver_incarnation({"ONCEPROOF_DRIVER_INCARNATION": ""}) == "0"
    assert job.driver_incarnation({"ONCEPROOF_DRIVER_INCARNATION": "3"}) == "3"


class _Meta:
    def __init__(self, topics):
        self.topics = topics


class _Topic:
    def __init__(self, n, error=None):
        self.partitions = {p: object() for p in range(n)}
        self.error = error


def test_pool_size_comes_from_the_input_topic_metadata(monkeypatch):
    seen = {}

    class Admin:
        def __init__(self, conf):
            seen["conf"] = conf

        def list_topics(self, topic=None, timeout=-1):
            seen["topic"] = topic
            return _Meta({"input": _Topic(8)} if topic == "input" else {})

    monkeypatch.setattr(identity, "AdminClient", Admin)
    args = job.parse_args(["--bootstrap", "b:1", "--checkpoint", "/nonexistent", "--input-topic", "input"])
    assert job.pool_size(args) == 8 and seen["topic"] == "input" and seen["conf"]["bootstrap.servers"] == "b:1"
    # --pool-size only raises it (an old harness passing a smaller count does not shrink the pool)
    assert job.pool_size(job.parse_args(["--bootstrap", "b:1", "--checkpoint", "/x", "--input-topic", "input",
                                         "--pool-size", "6"])) == 8
    assert job.pool_size(job.parse_args(["--bootstrap", "b:1", "--checkpoint", "/x", "--input-topic", "input",
                                         "--pool-size", "12"])) == 12
    with pytest.raises(RuntimeError, match="no partition metadata"):
        job.pool_size(job.parse_args(["--bootstrap", "b:1", "--checkpoint", "/x", "--input-topic", "missing"]))


def test_the_driver_waits_for_its_input_topic_while_the_brokers_start_and_gives_up_at_the_deadline(monkeypatch):
    """onceproof.job.wait_for_input: no broker, then no topic, then the topic; a deadline re-raises."""
    now = [0.0]
    looks = []

    def partitions(bootstrap, topic, timeout_s=30.0):
        looks.append(now[0])
        if len(looks) == 1:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        if len(looks) == 2:
            raise RuntimeError("input topic 'input' has no partition metadata")
        return 6
    monkeypatch.setattr(job, "input_partitions", partitions)
    args = job.parse_args(["--bootstrap", "b:1", "--checkpoint", "/x"])
    tick = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731
    assert job.wait_for_input(args, timeout_s=10, clock=lambda: now[0], sleep=tick) == 6
    assert looks == [0.0, 0.5, 1.0]
    looks.clear()
    monkeypatch.setattr(job, "input_partitions",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no partition metadata")))
    with pytest.raises(RuntimeError, match="no partition metadata"):
        job.wait_for_input(args, timeout_s=2, clock=lambda: now[0], sleep=tick)
    # --pool-size still only raises the pool
    monkeypatch.setattr(job, "input_partitions", lambda *a, **k: 6)
    assert job.wait_for_input(job.parse_args(["--bootstrap", "b:1", "--checkpoint", "/x", "--pool-size", "9"]),
                              timeout_s=1) == 9
