"""Input transactions that abort, on purpose (``--input-aborts``, the default 0.1 of the workload's
transactions), on the real local cluster under ``kill-driver``: the bundled pipeline without
``kafka.isolation.level=read_committed`` (``eos-read-uncommitted``) copies aborted input records and is
caught with ``aborted-input-read``, each example naming the input transaction and its outcome. About
100 s on 2 cores.

The run leases a warm cluster (``run --warm-cluster``, ``harness/warm.py``) that an earlier "run" left dirty:
one broker SIGKILLed and a transaction left open on a topic of its own. The health gate must find both,
restart the broker and delete the topic before the run starts, and the run's verdict must be the one a
fresh cluster gives; the warm brokers outlive the run, tagged with their owner, not the run.

The correct side (eos valid, its completeness guard counting the gaps through a second
read_committed reader) is asserted on ``test_fault_families.py``'s eos run, which has the same input."""

from __future__ import annotations

import psutil
import pytest
from confluent_kafka import Producer

from onceproof.backends import registry
from onceproof.clients import topics
from onceproof.harness import warm
from onceproof.workloads.transactional_client import ABORTED_ON_PURPOSE
from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


@pytest.fixture
def dirty_warm_cluster(tmp_path):
    """A warm cluster left as a crashed cell would leave it: broker 2 SIGKILLed, a transaction open on a
    ``warm-`` topic of an earlier run. Stopped (with its reaper) on every exit path."""
    owned = warm.start(registry.get("local"), tmp_path / "warm")
    try:
        c = owned.current()
        old = warm.PREFIX + "0ld-input"
        topics.create_topics(c.bootstrap, {old: 2}, replication=3)
        prod = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "left-open"})
        prod.init_transactions(30)
        prod.begin_transaction()
        prod.produce(old, b"never committed", partition=0)
        prod.flush(30)  # sent, neither committed nor aborted: the partition's LSO stays below its high watermark
        c.kill(2)
        yield c, old
    finally:
        owned.stop()


def _run(results_root, sink: str, expect: int, extra: list[str] = ()) -> tuple:
    p = run_cli(["run", "--sink", sink, "--nemesis", "kill-driver", "--time-limit", "25", "--seed", "1",
                 "--results", str(results_root), *extra], timeout=700)
    out = p.stdout + p.stderr
    assert p.returncode != 254, out[-3000:]
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == expect, (result.get("verdict"), result.get("counts"), out[-3000:])
    assert not our_processes(str(run_dir)), "processes of the run left running"
    inp = result["input"]
    assert inp["producer"] == "transactional" and inp["input_aborts"] == 0.1, inp
    assert inp["aborted_on_purpose"] > 0 and inp["hold_ms"] == 3000, inp
    fails = result["stats"]["sends_fail"]
    assert fails > 0, result["stats"]  # the aborted transactions' sends are fail ops
    return run_dir, result, out


@pytest.mark.timeout(800)
def test_eos_read_uncommitted_is_caught_copying_aborted_input(results_root, dirty_warm_cluster):
    c, old = dirty_warm_cluster
    before = {n: c.state(n).pid for n in (1, 3)}
    run_dir, result, out = _run(results_root, "eos-read-uncommitted", 1,
                                ["--warm-cluster", str(c.spec.data_dir)])
    c = registry.get("local").attach(c.spec.data_dir)  # the pids the gate's restart recorded
    gate = result["cluster"]["gate"]
    assert result["cluster"]["warm"] and 2 in gate["restarted"], result["cluster"]
    assert "broker 2 was not running" in gate["problems"], gate
    assert any(old in p and "transaction left open" in p for p in gate["problems"]), gate
    assert gate["deleted_topics"] >= 1 and old not in topics.admin(c.bootstrap).list_topics(timeout=10).topics
    # the run started no broker of its own: no broker log in the run, the healthy brokers' processes unchanged
    assert not list((run_dir / "logs").glob("broker-*")), sorted(p.name for p in (run_dir / "logs").iterdir())
    for n in c.nodes:  # the warm brokers outlive the run, the restarted one tagged with the owner, not the run
        st = c.state(n)
        assert st.alive, (n, st)
        assert psutil.Process(st.pid).environ().get("ONCEPROOF_RUN") == str(c.spec.data_dir)
    assert {n: c.state(n).pid for n in (1, 3)} == before
    c = result["counts"]
    assert result["verdict"] == "invalid" and c["aborted-input-read"] > 0, c
    ex = result["anomalies"]["aborted-input-read"][0]
    assert ex["input_outcome"] == ABORTED_ON_PURPOSE and "#" in ex["input_txn"], ex
    assert "aborted-input-read" in out
