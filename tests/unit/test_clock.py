"""``clock-skew`` (issue 29 item 2) in pure logic: libfaketime's offset file (format, parse, atomic write,
the reaper's reset), the environment a faked process gets (and that a cluster without clocks preloads
nothing), the stale shared-memory sweep on a directory of this test, the probe's skew arithmetic, the broker
log's timestamps and rollback lines (synthetic lines in Kafka's log4j layout), the judgement, and the fault
against the stand-in backend (skipped without clocks, healed). Nothing here starts a JVM or Kafka."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from onceproof.backends.common import faketime
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.local.kafka import KafkaCluster
from onceproof.nemesis import catalog, clock, packages
from onceproof.nemesis.clock import ClockSkew, judge, log_time, rollbacks, skew_s
from onceproof.nemesis.fault import SKIPPED, NemesisContext
from tests.stand_in_backend import ClockStandInCluster, StandInCluster

# ------------------------------------------------------------------------------------------ offset file


@pytest.mark.parametrize("seconds,line", [(0, "+0"), (60, "+60"), (-90, "-90"), (60.0, "+60")])
def test_an_offset_is_whole_signed_seconds_and_reads_back(seconds, line, tmp_path):
    assert faketime.format_offset(seconds) == line
    p = tmp_path / "clock-offset"
    faketime.write_offset(p, seconds)
    assert p.read_text() == line + "\n" and faketime.read_offset(p) == seconds
    assert [f.name for f in tmp_path.iterdir()] == ["clock-offset"]  # no temporary file left


@pytest.mark.parametrize("bad", [1.5, float("nan"), float("inf")])
def test_a_fractional_offset_is_refused(bad):
    with pytest.raises(ValueError, match="whole seconds"):
        faketime.format_offset(bad)


@pytest.mark.parametrize("text,seconds", [("+60", 60), ("-2m", -120), ("+1.5h", 5400), (" +0 \n", 0), ("", 0),
                                          ("-1d", -86400), ("+30s", 30)])
def test_relative_offsets_parse_as_libfaketime_reads_them(text, seconds):
    assert faketime.parse_offset(text) == seconds


@pytest.mark.parametrize("text", ["2020-12-24 20:30:00", "@2020-01-01 00:00:00", "+0 x2", "60", "+6w"])
def test_anything_but_a_relative_offset_is_an_error_naming_the_form(text):
    with pytest.raises(ValueError, match=r"\+N or -N"):
        faketime.parse_offset(text)


def test_a_missing_offset_file_is_the_real_time(tmp_path):
    assert faketime.read_offset(tmp_path / "none") == 0


def test_the_reaper_puts_noted_offset_files_back_to_zero(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("ONCEPROOF_RUN", str(run))
    a, b = tmp_path / "a", tmp_path / "b"
    faketime.write_offset(a, 60)
    faketime.write_offset(b, 0)
    for p in (a, b, a, tmp_path / "gone"):
        faketime.note(p)
    assert faketime.reset_noted(str(run)) == [str(a)]
    assert faketime.read_offset(a) == 0 and faketime.read_offset(b) == 0
    assert faketime.reset_noted(str(run)) == [] and faketime.reset_noted(str(tmp_path / "no-run")) == []


def test_outside_a_run_nothing_is_noted(tmp_path, monkeypatch):
    monkeypatch.delenv("ONCEPROOF_RUN", raising=False)
    faketime.note(tmp_path / "x")
    assert not (tmp_path / faketime.NOTED).exists()


# ------------------------------------------------------------------------------------------- environment


@pytest.fixture
def fake_lib(tmp_path, monkeypatch):
    lib = tmp_path / "libfaketime.so.1"
    lib.write_bytes(b"")
    monkeypatch.setenv(faketime.LIB_ENV, str(lib))
    return lib


def test_the_environment_preloads_libfaketime_first_and_drops_faketime(fake_lib, tmp_path):
    f = tmp_path / "off"
    env = faketime.env(f, base={"PATH": "/bin", "FAKETIME": "+99", "LD_PRELOAD": "/x/other.so"})
    assert env["LD_PRELOAD"] == f"{fake_lib} /x/other.so"
    assert "FAKETIME" not in env and env["PATH"] == "/bin"
    assert env["FAKETIME_TIMESTAMP_FILE"] == str(f) and env["FAKETIME_DONT_FAKE_MONOTONIC"] == "1"
    assert env["FAKETIME_CACHE_DURATION"] == "1" and env["NO_FAKE_STAT"] == "1"
    assert env["FAKETIME_FORCE_MONOTONIC_FIX"] == "0"  # on, a JVM's timed waits return at once
    assert faketime.env(f, base={})["LD_PRELOAD"] == str(fake_lib)


def test_without_libfaketime_the_reason_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(faketime.LIB_ENV, str(tmp_path / "missing.so"))
    why = faketime.unavailable()
    assert faketime.library() is None and "make clock-prereqs" in why and "missing.so" in why
    with pytest.raises(RuntimeError, match="make clock-prereqs"):
        faketime.env(tmp_path / "off")


def _cluster(tmp_path, clocks: bool) -> KafkaCluster:
    return KafkaCluster(ClusterSpec(tmp_path, nodes=3), clocks=clocks)


def test_a_cluster_without_clocks_preloads_nothing(tmp_path, fake_lib):
    c = _cluster(tmp_path, clocks=False)
    assert c.node_env(1) is None
    assert "planned no clock fault" in c.clock_unavailable() and c.clock_offset(1) == 0


def test_a_cluster_with_clocks_preloads_each_node_its_own_file(tmp_path, fake_lib):
    c = _cluster(tmp_path, clocks=True)
    e1, e2 = c.node_env(1), c.node_env(2)
    assert e1["LD_PRELOAD"].startswith(str(fake_lib)) and e1["FAKETIME_TIMESTAMP_FILE"] != e2["FAKETIME_TIMESTAMP_FILE"]
    assert c.clock_unavailable() is None
    (tmp_path / "node2").mkdir()
    c.set_clock_offset(2, -60)
    assert c.clock_offset(2) == -60 and c.clock_offset(1) == 0
    assert Path(e2["FAKETIME_TIMESTAMP_FILE"]).read_text() == "-60\n"
    assert c.reset_clocks() == [2] and c.clock_offset(2) == 0


def test_clocks_without_libfaketime_start_plain_and_the_fault_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv(faketime.LIB_ENV, str(tmp_path / "missing.so"))
    c = _cluster(tmp_path, clocks=True)
    assert c.node_env(1) is None and "make clock-prereqs" in c.clock_unavailable()


def test_stale_shared_memory_of_dead_processes_only_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    live = str(os.getpid())
    names = [f"faketime_shm_{dead}", f"sem.faketime_sem_{dead}", f"faketime_shm_{live}", f"sem.faketime_sem_{live}",
             f"other_{dead}"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    assert sorted(faketime.remove_stale_shm(tmp_path)) == sorted(names[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])


# ---------------------------------------------------------------------------------------- evidence, pure


def test_the_skew_is_the_brokers_time_against_the_round_trips_midpoint():
    assert skew_s(1000.0, 1000.2, 1_060_100) == 60.0
    assert skew_s(1000.0, 1000.2, 940_100) == -60.0
    assert skew_s(1000.0, 1000.0, 1_000_000) == 0.0


def _line(t: float, msg: str) -> str:
    stamp = datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return f"[{stamp}] INFO {msg} (kafka.coordinator.transaction.TransactionCoordinator)"


def test_a_log_lines_time_is_its_log4j_stamp_in_local_time():
    t = 1_790_000_000.123
    assert log_time(_line(t, "x")) == pytest.approx(t, abs=0.001)
    assert log_time("\tat kafka.Foo(Foo.java:1)") is None and log_time("") is None


def test_rollbacks_name_only_the_sinks_ids():
    t = time.time()
    lines = [_line(t, "[TransactionCoordinator id=2] Completed rollback of ongoing transaction for transactionalId "
                      "sink-a-3 due to timeout"),
             _line(t, "[TransactionCoordinator id=2] Completed rollback of ongoing transaction for transactionalId "
                      "someone-else due to timeout"),
             _line(t, "[TransactionCoordinator id=2] Initialized transactionalId sink-a-3 with producerId 7")]
    got = rollbacks(lines, ["sink-a-3", "sink-a-4"])
    assert [r["txn_id"] for r in got] == ["sink-a-3"] and got[0]["logged_at"] == pytest.approx(t, abs=0.001)
    assert rollbacks(lines, []) == []


@pytest.mark.parametrize("during,logs,want", [
    ({"ok": True, "skew_s": 59.2}, [], True),
    ({"ok": True, "skew_s": 0.1}, [60.0], False),  # the probe outranks the log
    ({"ok": True, "skew_s": -61.5}, [], False),  # the wrong direction
    ({"ok": False, "error": "timeout"}, [58.9, 59.4, 12.0], True),
    ({"ok": False, "error": "timeout"}, [], False),
    (None, [1.0], False),
])
def test_the_turn_is_effective_when_the_brokers_own_clock_shows_the_offset(during, logs, want):
    assert judge(60, during, logs) is want


def test_the_jump_outlasts_the_transaction_timeout():
    f = ClockSkew("broker-jump-forward", txn_timeout_ms=30000)
    assert f.offset_s("broker-jump-forward") == 60 and f.offset_s("broker-jump-back") == -60
    assert ClockSkew(txn_timeout_ms=10001).offset_s("broker-jump-forward") == 41
    back, forward = (ClockSkew.expected_s(t, 6.0, 30000) for t in ("broker-jump-back", "broker-jump-forward"))
    assert back > forward
    with pytest.raises(ValueError, match="broker-jump-forward"):
        ClockSkew("driver")


def test_the_probe_topic_is_a_request_librdkafka_accepts():
    """The first cluster run's probe topic (a replica assignment with the default partition count) was refused
    by the client before any request: ``ValueError`` on every turn."""
    from confluent_kafka.admin import AdminClient

    t = clock.probe_topic(2)
    assert (t.topic, t.replica_assignment, t.config["message.timestamp.type"]) == ("onceproof-clock-2", [[2]],
                                                                                  "LogAppendTime")
    a = AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    futures = a.create_topics([t], operation_timeout=1, request_timeout=1)  # no broker: it fails later, not here
    assert set(futures) == {"onceproof-clock-2"}


# ------------------------------------------------------------------------- the fault on the stand-in


def _ctx(tmp_path, cluster) -> NemesisContext:
    return NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path, cluster=cluster, hold_s=0.01,
                          sink_ids=["s-0", "s-1"])


def test_a_cluster_without_clock_faults_skips_the_turn(tmp_path):
    out = ClockSkew("broker-jump-forward").invoke(_ctx(tmp_path, StandInCluster()), random.Random(1))
    assert out.outcome == SKIPPED and "cannot offset" in out.evidence["reason"]


def test_a_cluster_without_libfaketime_skips_with_the_fix(tmp_path):
    c = ClockStandInCluster()
    c.no_clock = "libfaketime is not installed (...): make clock-prereqs"
    out = ClockSkew("broker-jump-back").invoke(_ctx(tmp_path, c), random.Random(1))
    assert out.outcome == SKIPPED and "make clock-prereqs" in out.evidence["reason"]
    assert not [x for x in c.calls if x[0] == "clock"]


def test_heal_puts_every_offset_clock_back_and_is_idempotent(tmp_path):
    c = ClockStandInCluster()
    c.offsets = {1: 60.0, 3: -60.0}
    f = ClockSkew()
    f.heal(_ctx(tmp_path, c))
    f.heal(_ctx(tmp_path, c))
    assert [c.clock_offset(n) for n in c.nodes] == [0, 0, 0]
    assert [x for x in c.calls if x[0] == "clock"] == [("clock", 1, 0), ("clock", 3, 0)]
    f.heal(_ctx(tmp_path, StandInCluster()))  # no clocks: nothing to do, no error


# ------------------------------------------------------------------------------------------ registration


def test_clock_skew_runs_when_named_or_in_its_package_never_in_all():
    assert catalog.parse("clock-skew") == ["clock-skew"]
    assert catalog.expand("clock-skew") == ["clock-skew:broker-jump-forward", "clock-skew:broker-jump-back"]
    assert not any(s.startswith("clock-skew") for s in catalog.all_specs())
    assert packages.specs("clock") == ["clock-skew:broker-jump-forward", "clock-skew:broker-jump-back",
                                       "driver-clock-skew:jump-forward", "driver-clock-skew:jump-back"]
    assert catalog.needs_clock(["kill-driver", "clock-skew:broker-jump-back"])
    assert not catalog.needs_clock(catalog.all_specs())
    with pytest.raises(ValueError, match="broker-jump-forward"):
        catalog.parse("clock-skew:sideways")
    assert clock.ClockSkew.name in catalog.CLOCK


def test_a_sink_without_kafka_transactions_cannot_take_a_clock_fault():
    """Seen: the at-least-once sink under both targets had no coordinator to aim at (every turn skipped,
    verdict unknown); such a run is now refused before it starts, naming the sinks that can take it."""
    from onceproof.harness.config import ConfigError, TestConfig

    assert catalog.sink_needs("clock-skew") == {"transactions"}
    with pytest.raises(ConfigError) as e:
        TestConfig(sink="at-least-once", nemesis=["clock-skew:broker-jump-forward"], time_limit=90).validate()
    assert e.value.option == "--nemesis" and "eos" in e.value.message, e.value.message
    TestConfig(sink="eos", nemesis=["clock-skew:broker-jump-forward", "clock-skew:broker-jump-back"],
               time_limit=90).validate()
