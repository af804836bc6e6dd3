"""Issue 9's pure pieces for a user's pipeline: the ``--pipeline-cmd`` template and the commit window
seen from outside the driver (no hook in the user's code). Synthetic inputs only."""

from __future__ import annotations

import json

import pytest

from onceproof.backends.base import PipelineArgs
from onceproof.backends.common import supervisor
from onceproof.backends.user_pipeline import PLACEHOLDERS, PipelineCommand, PipelineCommandError
from onceproof.nemesis.commit_window_watch import CommitWindowWatch
from onceproof.sinks import user_outputs
from onceproof.sinks.base import JobPlace

VALUES = {"python": "/venv/bin/python", "bootstrap": "127.0.0.1:9092,127.0.0.1:9093", "input_topic": "input",
          "output_topic": "output", "checkpoint": "/runs/a b/checkpoint", "master": "local-cluster[2,1,1024]",
          "jars": "/j/a.jar,/j/b.jar", "output_path": "/runs/a b/file-sink",
          "postgres_dsn": "host=127.0.0.1 port=5 dbname=onceproof user=onceproof", "output_table": "output",
          "iceberg_conf": '{"spark.sql.catalog.onceproof.warehouse": "/runs/a b/iceberg-warehouse"}'}


def test_every_placeholder_expands_to_one_word_without_a_shell():
    cmd = PipelineCommand.parse("{python} 'my pipe.py' --bootstrap={bootstrap} --in {input_topic} "
                                "--out {output_topic} --checkpoint {checkpoint} --master {master} --jars {jars} "
                                "--literal '{{not a placeholder}}' '$HOME;rm' --path {output_path} "
                                "--dsn {postgres_dsn} --table {output_table} --conf {iceberg_conf}")
    assert cmd.used == set(PLACEHOLDERS)
    assert cmd.argv(VALUES) == ["/venv/bin/python", "my pipe.py", "--bootstrap=127.0.0.1:9092,127.0.0.1:9093",
                                "--in", "input", "--out", "output", "--checkpoint", "/runs/a b/checkpoint",
                                "--master", "local-cluster[2,1,1024]", "--jars", "/j/a.jar,/j/b.jar",
                                "--literal", "{not a placeholder}", "$HOME;rm", "--path", "/runs/a b/file-sink",
                                "--dsn", "host=127.0.0.1 port=5 dbname=onceproof user=onceproof",
                                "--table", "output", "--conf", VALUES["iceberg_conf"]]
    assert cmd.argv(VALUES) == cmd.argv(dict(VALUES)), "a restart gets the same argv"


@pytest.mark.parametrize("text, says", [
    ("", "is empty"),
    ("   ", "is empty"),
    ("{python} job.py --x {bootstrap_servers}", "unknown placeholder {bootstrap_servers}; choose from {python}"),
    ("{python} job.py {}", "unknown placeholder {}"),
    ("{python} job.py --b {bootstrap!r}", "no format spec or conversion; write {bootstrap}"),
    ("{python} job.py --b {bootstrap:>10}", "no format spec"),
    ("{python} job.py '--b {bootstrap'", "literal brace"),
    ("{python} job.py 'unclosed", "No closing quotation"),
])
def test_a_bad_command_is_refused_naming_the_fix(text, says):
    with pytest.raises(PipelineCommandError) as e:
        PipelineCommand.parse(text)
    assert says in str(e.value), str(e.value)


def test_a_placeholder_without_a_value_is_a_harness_bug_not_silently_blank():
    cmd = PipelineCommand.parse("{python} job.py --jars {jars}")
    with pytest.raises(KeyError, match="jars"):
        cmd.argv({"python": "py"})


def test_the_window_opens_when_output_grows_after_offsets_n_and_before_commits_n():
    w = CommitWindowWatch()
    assert w.observe(None, None, {}) is None                      # nothing yet
    assert w.observe(0, None, {0: 0, 1: 0}) is None               # offsets/0 logged: baseline taken
    assert w.observe(0, None, {0: 0, 1: 0}) is None               # batch 0 running, nothing visible
    assert w.observe(0, None, {0: 5, 1: 0}) == 0                  # its output is visible, no commits/0
    assert w.observe(0, 0, {0: 5, 1: 3}) is None                  # commits/0: closed
    assert w.observe(1, 0, {0: 5, 1: 3}) is None                  # offsets/1: new baseline
    assert w.observe(1, 0, {0: 5, 1: 3, 2: 1}) == 1               # a partition new to the baseline grew
    assert w.observe(2, 1, {0: 9, 1: 3, 2: 1}) is None            # offsets/2 seen after its output: baseline
    assert w.observe(2, 1, {0: 9, 1: 3, 2: 1}) is None            # ... so this window is missed, not invented


def test_an_empty_batch_and_a_restart_replay():
    w = CommitWindowWatch()
    w.observe(3, 2, {0: 10})
    assert w.observe(3, 2, {0: 10}) is None                       # batch 3 wrote nothing: no window
    assert w.observe(3, 2, {0: 12}) == 3                          # now it did
    # the driver is killed here; the restarted driver replays batch 3 (offsets/3 still without commits/3)
    assert w.observe(3, 2, {0: 12}) == 3                          # still open: output grew since offsets/3
    assert w.observe(3, 3, {0: 12}) is None                       # the replay committed


# ------------------------------------------------------------- the fault, the config, the supervisor


class _Ends:
    """The output's LSOs as a script: each read() returns the next value (the last one repeats)."""

    def __init__(self, script):
        self.script = list(script)

    def __call__(self, bootstrap, topic):
        return self

    def read(self):
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


def _watch_ctx(tmp_path, spark):
    from onceproof.nemesis.fault import NemesisContext
    from tests.stand_in_backend import StandInCluster

    return NemesisContext(spark=spark, control=tmp_path / "control", checkpoint=tmp_path / "ck",
                          cluster=StandInCluster(3, tmp_path), commit_window="watch")


def _log(ck, kind, n):
    (ck / kind).mkdir(parents=True, exist_ok=True)
    (ck / kind / str(n)).write_text("v1\n{}\n")


def test_the_watch_kills_the_driver_only_once_the_batch_output_shows_before_its_commit(tmp_path, monkeypatch):
    import random

    from onceproof.nemesis.commit_window import KillDriverInCommitWindow
    from tests.stand_in_backend import StandInSpark

    ck = tmp_path / "ck"
    for n in range(3):
        _log(ck, "offsets", n)
        _log(ck, "commits", n)
    _log(ck, "offsets", 3)  # batch 3 planned, not committed
    spark = StandInSpark(ck)
    # polls: the baseline, no growth, then partition 1 grows
    fault = KillDriverInCommitWindow(window_timeout_s=5, poll_s=0.001,
                                     output_ends=_Ends([{0: 10, 1: 20}, {0: 10, 1: 20}, {0: 10, 1: 27}]))
    out = fault.invoke(_watch_ctx(tmp_path, spark), random.Random(1))
    assert out.outcome == "effective", out
    ev = out.evidence
    assert (ev["mode"], ev["batch"], ev["pid"]) == ("watch", 3, 4242)
    assert ev["offsets_logged"] and not ev["commit_logged_at_kill"] and not ev["commit_logged_after_kill"]
    assert ev["output_end_at_offsets_logged"] == {"0": 10, "1": 20} and ev["output_end_at_kill"] == {"0": 10, "1": 27}
    assert spark.calls == [("freeze_driver", 4242), ("kill_driver", 4242)]
    assert ev["frozen"] and ev["windows_missed"] == 0 and (ev["settle_s"], ev["settled_polls"]) == (0.0, 0)


def test_the_watch_never_kills_a_driver_whose_batches_are_all_committed(tmp_path):
    import random

    from onceproof.nemesis.commit_window import KillDriverInCommitWindow
    from tests.stand_in_backend import StandInSpark

    ck = tmp_path / "ck"
    _log(ck, "offsets", 0)
    _log(ck, "commits", 0)  # output grows, but batch 0's commit is logged: no window
    spark = StandInSpark(ck)
    fault = KillDriverInCommitWindow(window_timeout_s=0.3, poll_s=0.01,
                                     output_ends=_Ends([{0: 1}, {0: 5}, {0: 9}]))
    out = fault.invoke(_watch_ctx(tmp_path, spark), random.Random(1))
    assert out.outcome == "not-effective" and "no batch's output was seen" in out.evidence["reason"], out
    assert out.evidence["polls"] > 3 and spark.calls == []


def test_a_pipeline_cmd_run_is_named_after_its_script_and_refuses_what_cannot_reach_it(monkeypatch):
    import shlex

    from onceproof.backends import registry
    from onceproof.harness.config import ConfigError, TestConfig

    monkeypatch.setitem(registry.BACKENDS, "stand-in", "tests.stand_in_backend:StandInBackend")

    cmd = "{python} 'examples/my job.py' --bootstrap {bootstrap}"
    c = TestConfig(pipeline_cmd=cmd, nemesis=["kill-driver-in-commit-window", "kill-broker"]).validate()
    assert c.name == "my-job-kill-driver-in-commit-window+kill-broker"
    assert "txn-coordinator" not in c.target_choices()["kill-broker"]  # no transactional ids to find
    assert c.sink_capabilities == frozenset()
    from onceproof.harness.cli import parse_run_args

    assert parse_run_args(shlex.split(c.replay_command())[2:]).pipeline_cmd == cmd
    for kw, option, says in [({"nemesis": ["commit-delay:precommit"]}, "--nemesis", "cannot hit a --pipeline-cmd"),
                             ({"sink": "at-least-once"}, "--sink", "brings its own"),
                             ({"backend": "stand-in"}, "--pipeline-cmd", "runs the bundled pipeline only"),
                             ({"pipeline_cmd": "{python} x.py {nope}"}, "--pipeline-cmd", "unknown placeholder")]:
        with pytest.raises(ConfigError) as e:
            TestConfig(**{"pipeline_cmd": cmd, **kw}).validate()
        assert e.value.option == option and says in str(e.value), str(e.value)


def test_a_user_query_is_ready_when_spark_wrote_the_checkpoint_metadata_and_a_driver_runs(tmp_path):
    from onceproof.backends.common.supervisor import checkpoint_ready

    assert checkpoint_ready(tmp_path, 77) is None  # no metadata yet
    (tmp_path / "metadata").write_text('{"id":"5f2c"}')
    assert checkpoint_ready(tmp_path, None) is None  # between incarnations
    assert checkpoint_ready(tmp_path, 77) == {"pid": 77, "query_id": "5f2c", "source": "checkpoint"}


def test_executor_logs_are_collected_for_applications_seen_only_on_executor_command_lines(tmp_path, monkeypatch):
    from onceproof.backends.common import jars, supervisor

    spark_home = tmp_path / "pyspark"
    monkeypatch.setattr(jars, "pyspark_jars_dir", lambda: spark_home / "jars")
    for app in ("app-1", "app-2", "app-other"):
        (spark_home / "work" / app / "0").mkdir(parents=True)
        (spark_home / "work" / app / "0" / "stderr").write_text(f"{app} log")
        (spark_home / "work" / app / "0" / "big.jar").write_bytes(b"x")
    dest = tmp_path / "executors"
    assert supervisor.collect_executor_logs(tmp_path / "no-control", dest, {"app-1", "app-2"}) == 2
    assert (dest / "app-2" / "0" / "stderr").read_text() == "app-2 log"
    assert not (dest / "app-1" / "0" / "big.jar").exists()
    assert sorted(p.name for p in (spark_home / "work").iterdir()) == ["app-other"]  # another run's: kept


def test_a_window_that_closed_before_the_freeze_is_thawed_and_the_next_batch_is_taken(tmp_path, monkeypatch):
    import random

    from onceproof.nemesis.commit_window import KillDriverInCommitWindow
    from tests.stand_in_backend import StandInSpark

    ck = tmp_path / "ck"
    _log(ck, "offsets", 0)

    class CommitsAtFreeze(StandInSpark):
        """Spark writes commits/0 just as the first freeze lands; batch 1 stays open."""

        __slots__ = ()

        def freeze_driver(self, pid):
            if not (ck / "commits" / "0").exists():
                _log(ck, "commits", 0)
                _log(ck, "offsets", 1)
            return super().freeze_driver(pid)

    spark = CommitsAtFreeze(ck)
    ends = _Ends([{0: 5}, {0: 6}, {0: 6}, {0: 6}, {0: 9}])  # batch 0's output, then batch 1's
    out = KillDriverInCommitWindow(window_timeout_s=5, poll_s=0.001, output_ends=ends).invoke(
        _watch_ctx(tmp_path, spark), random.Random(1))
    assert out.outcome == "effective" and out.evidence["batch"] == 1, out
    assert out.evidence["windows_missed"] == 1
    assert spark.calls == [("freeze_driver", 4242), ("thaw_driver", 4242), ("freeze_driver", 4242),
                           ("kill_driver", 4242)]


def test_a_file_sinks_committed_end_is_its_metadata_log(tmp_path):
    from onceproof.sinks.base import OutputLocation
    from onceproof.sinks.file_log import MetadataLogEnds

    assert MetadataLogEnds(OutputLocation(directory=tmp_path)).read() == {0: 0}
    (tmp_path / "_spark_metadata").mkdir()
    for n in ("0", "1", "9.compact", ".10.abc.tmp", "10"):
        (tmp_path / "_spark_metadata" / n).write_text("v1\n")
    assert MetadataLogEnds(OutputLocation(directory=tmp_path)).read() == {0: 11}


def test_a_directory_without_a_log_is_read_as_sparks_batch_reader_lists_it(tmp_path):
    """A job writing ``df.write.json`` from foreachBatch leaves no ``_spark_metadata``: its committed end
    is its data files (``_temporary`` and ``_SUCCESS`` are not data), and its view holds every file's
    lines, a batch written twice included."""
    from onceproof.sinks.base import OutputLocation
    from onceproof.sinks.file_log import MetadataLogEnds, read_output

    loc = OutputLocation(directory=tmp_path)
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / "_temporary" / "0" / "part-00000-x.json").write_text('{"key":"k1","seq":0}\n')
    (tmp_path / "_SUCCESS").write_text("")
    assert MetadataLogEnds(loc).read() == {0: 0}
    batch = '{"key":"k1","seq":0,"in_partition":0,"in_offset":0}\n{"key":"k2","seq":0,"in_partition":1,"in_offset":0}\n'
    (tmp_path / "part-00000-a.json").write_text(batch)
    (tmp_path / "part-00000-b.json").write_text(batch)  # the same batch, replayed
    (tmp_path / ".part-00000-b.json.crc").write_text("x")
    assert MetadataLogEnds(loc).read() == {0: 2}
    view = read_output(loc)
    assert len(view.committed) == 4 and view.committed.groupby(["key", "seq"]).size().max() == 2
    assert view.summary["read"] == "listing (no log)" and view.summary["data_files"] == 2
    assert "no _spark_metadata log" in view.problems[0]


def test_a_driver_that_keeps_exiting_before_its_query_starts_is_named_with_its_last_log_lines(tmp_path):
    from onceproof.harness.runner import _early_exits

    log = tmp_path / "driver-3.log"
    log.write_text("starting\n\nTraceback (most recent call last):\n  File \"my_job.py\", line 3\n"
                   "ModuleNotFoundError: No module named 'pandas'\n")

    class Spark:
        def restarts(self):
            return 3

        def driver_log(self):
            return log

    why = _early_exits(Spark())
    assert why.startswith("the Spark driver exited 3 times before its query started")
    assert "No module named 'pandas'" in why and str(log) in why


def test_the_previous_batchs_late_markers_are_not_taken_for_the_next_batchs_output():
    """Batch 1's commit markers land on partitions 0 and 4 after offsets/2 is logged (Kafka writes them
    after commit_transaction() returns): within the settle that growth joins the baseline; batch 2's own
    growth after it opens the window."""
    w = CommitWindowWatch(settle_s=0.5)
    assert w.observe(2, 1, {0: 0, 1: 201, 4: 0}, now=10.0) is None
    assert w.observe(2, 1, {0: 162, 1: 201, 4: 165}, now=10.2) is None  # batch 1's markers, late
    assert w.baseline == {0: 162, 1: 201, 4: 165}
    assert w.observe(2, 1, {0: 162, 1: 201, 4: 165}, now=10.7) is None
    assert w.observe(2, 1, {0: 170, 1: 201, 4: 165}, now=11.4) == 2  # batch 2's records
    assert w.absorbed == 1
    assert CommitWindowWatch().observe(2, 1, {0: 0}, now=1.0) is None


def test_only_a_kafka_outputs_committed_end_settles():
    """Kafka's commit markers land after the commit returned; a table's, a file log's and a database's
    commit is visible at once, so their watch keeps no settle (it would miss fast batches for nothing)."""
    import pkgutil

    from onceproof.sinks import registry as sinks
    from onceproof.sinks.kafka_topic import OutputEnds

    assert OutputEnds.settle_s == 0.5
    ends = {s.committed_end for s in sinks.entries()} - {"onceproof.sinks.kafka_topic:OutputEnds"}
    assert ends, "no other committed end to compare"
    for where in ends:
        assert getattr(pkgutil.resolve_name(where), "settle_s", 0.0) == 0.0, where


@pytest.mark.parametrize("output", sorted(user_outputs.OUTPUTS))
def test_each_output_gives_its_job_exactly_its_own_placeholders(output, tmp_path, monkeypatch):
    """``Sink.job_values`` is the one source of an output's placeholders: it gives a value to each one
    ``user_outputs`` lists for that output and to no other, and the driver's command gets them."""
    out = user_outputs.OUTPUTS[output]
    entry = out.entry()
    place = JobPlace(directory=tmp_path / "out dir", output_topic="warm-ab12cd34-output",
                     dsn="host=127.0.0.1 port=5 dbname=onceproof user=onceproof")
    values = dict(entry.job_values(place)) if entry.job_values else {}
    assert set(values) == set(out.placeholders), (output, values)
    monkeypatch.setattr(supervisor, "connector_jars", lambda *a, **k: "/j/kafka.jar")  # no Maven here
    words = [w for p in sorted(out.placeholders) for w in (f"--{p}", "{" + p + "}")]
    pipeline = PipelineArgs(bootstrap="h:1", sink=output, checkpoint=tmp_path / "ck", control=tmp_path / "ctl",
                            sink_log=tmp_path / "sink.jsonl", input_topic="warm-ab12cd34-input",
                            output_topic=place.output_topic, progress_topic="p", sink_id="s", trigger_ms=1000,
                            max_offsets=10, txn_timeout_ms=10000, pool_size=2, master="local[2]",
                            command=" ".join(["{python}", "job.py", "--out", "{output_topic}", *words]),
                            output_values=tuple(values.items()))
    argv = supervisor.driver_argv(pipeline, python="/venv/bin/python")
    got = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert argv[:4] == ["/venv/bin/python", "job.py", "--out", place.output_topic], argv
    want = {"files": {"--output_path": str(place.directory)}, "delta": {"--output_path": str(place.directory)},
            "postgres": {"--postgres_dsn": place.dsn, "--output_table": place.output_topic}, "kafka": {}}
    if output == "iceberg":
        conf = json.loads(got.pop("--iceberg_conf"))
        assert conf["spark.sql.catalog.onceproof.warehouse"] == str(place.directory), conf
        assert got == {"--output_table": "onceproof.db.output"}, got
    else:
        assert got == want[output], got
