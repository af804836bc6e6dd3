"""Pure parts of issue 10: the mutants' registry, the fault packages, the suite's cells, the zombie and
driver-override hooks, and ``--schedule`` files. The mutants' detection on the real cluster is in
``tests/test_detection.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from onceproof.harness import suite
from onceproof.harness.config import ConfigError, TestConfig, read_schedule
from onceproof.nemesis import catalog, packages
from onceproof.pipeline import hooks, mutants
from onceproof.sinks import registry as sinks


def test_every_mutant_is_a_sink_with_exactly_one_flaw_and_never_the_default():
    assert TestConfig().sink == "eos" and not mutants.flaws_of("eos").any
    for name, m in mutants.MUTANTS.items():
        s = sinks.get(name)
        assert s.mutant and s.writer is sinks.get("eos").writer and s.expect == "invalid"
        on = [f for f in mutants.Flaws.__dataclass_fields__ if getattr(m.flaws, f)]
        assert on == [m.flaw]
        assert m.package in packages.PACKAGES and s.targeted_by == m.package
    assert not sinks.get("eos").mutant and sinks.get("at-least-once").writer is not sinks.get("eos").writer


def test_packages_name_known_faults_and_all_is_their_union():
    every = packages.specs("all")
    for p in packages.PACKAGES:
        assert catalog.parse(",".join(packages.specs(p))) == packages.specs(p)
        assert set(packages.specs(p)) <= set(every)
    with pytest.raises(ValueError, match="choose from"):
        packages.parse("process,nope")


def test_mutant_cells_pair_each_mutant_with_its_package_and_eos_is_the_control():
    cells = suite.plan_cells(sinks_=[], workloads=["keyed"], package_names=[], test_count=2, time_limit=20,
                             mutants=True)
    by = {(c.sink, c.package) for c in cells}
    for name, m in mutants.MUTANTS.items():
        assert (name, m.package) in by
    assert {p for s, p in by if s == "eos"} == {m.package for m in mutants.MUTANTS.values()} | {"process"}
    assert all(c.expect == ("valid" if c.sink == "eos" else "invalid") for c in cells)
    assert sorted({c.seed for c in cells}) == [1, 2]
    # a package's faults need more than 20 s: the cell's time limit is raised, never the plan refused
    assert all(c.time_limit >= 20 for c in cells) and any(c.time_limit > 20 for c in cells)


def test_cells_only_get_faults_their_sink_can_take():
    cell = next(c for c in suite.plan_cells(sinks_=["at-least-once"], workloads=["keyed"],
                                            package_names=["process"], test_count=1, time_limit=30))
    specs = suite.cell_specs(cell)
    assert "kill-executor" in specs and not any(s.startswith("zombie-task") for s in specs)
    TestConfig(sink="at-least-once", nemesis=specs, time_limit=cell.time_limit).validate()
    with pytest.raises(ValueError, match="at-least-once sink can take none"):
        suite.plan_cells(sinks_=["at-least-once"], workloads=["keyed"], package_names=["upgrade"], test_count=1,
                         time_limit=30)


def test_driver_overrides_are_read_from_the_control_dir(tmp_path):
    assert hooks.driver_overrides(tmp_path) == {} and hooks.driver_overrides("") == {}
    (tmp_path / hooks.DRIVER_OVERRIDES).write_text('{"min_partitions": 12}')
    assert hooks.driver_overrides(tmp_path) == {"min_partitions": 12}
    (tmp_path / hooks.DRIVER_OVERRIDES).write_text("[1]")
    assert hooks.driver_overrides(tmp_path) == {}


def test_a_zombie_claims_only_its_partition_waits_for_release_and_survives_sighup(tmp_path):
    """In a child process (the hook changes signal dispositions): the task of partition 1 turns zombie,
    ignores SIGHUP (what PySpark's daemon sends when the executor dies) and goes on after the release."""
    (tmp_path / "zombie.precommit").write_text('{"partition": 1}')
    code = textwrap.dedent(f"""
        import json, os, signal, sys, threading, time
        from onceproof.pipeline import hooks
        events = []
        log = lambda **f: events.append(f)
        d = {str(tmp_path)!r}
        assert hooks.zombie_point(d, "precommit", {{"partition": 0}}, None, log) is None and not events
        threading.Timer(0.5, lambda: (os.kill(os.getpid(), signal.SIGHUP),
                                      open(os.path.join(d, "zombie.release"), "w").close())).start()
        rows = hooks.zombie_point(d, "precommit", {{"partition": 1}}, iter([1, 2]), log)
        print(json.dumps({{"rows": rows, "events": events}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["rows"] == [1, 2]
    assert [e["stage"] for e in got["events"]] == ["precommit", "precommit-released"]
    assert (tmp_path / hooks.ZOMBIE_PIDS).read_text().split() == [str(got["events"][0]["zombie_pid"])]
    assert not (tmp_path / "zombie.precommit").exists()


def test_schedule_files_replay_their_faults_and_keys(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"faults": [{"at_s": 30, "f": "kill-broker:leader", "rng": "targets-7-3"},
                                        {"at_s": 5, "f": "kill-executor"}]}))
    cfg = TestConfig(sink="at-least-once", schedule=str(f), nemesis=["kill-driver"]).validate()
    assert cfg.fault_plan() == [(5.0, "kill-executor"), (30.0, "kill-broker:leader")]
    assert cfg.rng_keys() == [None, "targets-7-3"]
    assert cfg.faults == ["kill-executor", "kill-broker:leader"]
    assert "--schedule" in cfg.replay_command()
    f.write_text(json.dumps({"faults": [{"at_s": 1, "f": "kill-nothing"}]}))
    with pytest.raises(ConfigError, match="unknown nemesis kill-nothing"):
        TestConfig(schedule=str(f)).validate()
    f.write_text(json.dumps({"faults": [{"at_s": -1, "f": "kill-driver"}]}))
    with pytest.raises(ValueError, match="at_s ≥ 0"):
        read_schedule(f)
    with pytest.raises(ConfigError, match="onceproof shrink"):
        TestConfig(schedule=str(tmp_path / "missing.json")).validate()
    # a schedule's fault must still fit the sink
    f.write_text(json.dumps({"faults": [{"at_s": 1, "f": "zombie-task:precommit"}]}))
    with pytest.raises(ConfigError, match="cannot hit the at-least-once sink"):
        TestConfig(sink="at-least-once", schedule=str(f)).validate()
