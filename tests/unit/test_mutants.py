"""Pure parts of issue 10: the mutants' registry, the fault packages, the suite's cells, the zombie and
driver-override hooks, and ``--schedule`` files. The mutants' detection on the real cluster is in
``tests/test_detection.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onceproof.harness import suite
from onceproof.harness.config import ConfigError, TestConfig, read_schedule
from onceproof.nemesis import catalog, packages
from onceproof.pipeline import hooks, mutants
from onceproof.sinks import registry as sinks


def test_every_mutant_is_a_sink_with_exactly_its_flaws_and_never_the_default():
    assert TestConfig().sink == "eos" and not mutants.flaws_of("eos").any
    for name, m in mutants.MUTANTS.items():
        s = sinks.get(name)
        assert s.mutant and s.writer is sinks.get("eos").writer and s.expect == "invalid"
        on = [f for f in mutants.Flaws.__dataclass_fields__ if getattr(m.flaws, f)]
        assert on == m.flaw.split("+")
        assert m.package in packages.PACKAGES and s.targeted_by == (m.package if m.caught else "")
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
                             mutants=True, weak_configs=True)
    assert not any(c.cluster_config for c in suite.plan_cells(sinks_=[], workloads=["keyed"], package_names=[],
                                                              test_count=1, time_limit=20, mutants=True))
    with pytest.raises(ValueError, match="--weak-configs .* with --mutants"):
        suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["disk"], test_count=1, time_limit=20,
                         weak_configs=True)
    by = {(c.label, c.package) for c in cells}
    for name, m in mutants.MUTANTS.items():
        assert ((name, m.package) in by) == m.caught  # a mutant no run has caught yet is left out
    assert not mutants.MUTANTS["eos-long-lived-producer"].caught
    # eos is the control of every package used, the weak cluster configs' included (single-replica × disk)
    assert {p for s, p in by if s == "eos"} == {m.package for m in mutants.MUTANTS.values() if m.caught} | {
        "process", "disk", "traps"}
    assert ("eos@single-replica", "disk") in by and ("eos-read-uncommitted", "commit") in by
    # eos is the control (valid) of every package, and caught (invalid) under the traps
    assert all(c.expect == ("valid" if c.label == "eos" and c.package not in packages.EXPECT_INVALID else "invalid")
               for c in cells)
    assert [c.expect for c in cells if c.package == "traps"] == ["invalid", "invalid"]
    weak = next(c for c in cells if c.cluster_config)
    argv = suite.run_command(weak, Path("/r"), [])
    assert argv[argv.index("--cluster-config") + 1] == "single-replica" and argv[argv.index("--sink") + 1] == "eos"
    assert weak.name == "eos-single-replica-disk"
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


JOB = "{python} jobs/orders_job.py --bootstrap {bootstrap} --checkpoint {checkpoint}"


def test_a_user_pipeline_is_certified_under_its_own_label_with_packages_narrowed():
    cells = suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["process", "commit"],
                             test_count=2, time_limit=30, pipeline_cmd=JOB)
    assert {c.sink for c in cells} == {"user:orders_job"} and all(c.expect == "valid" for c in cells)
    assert [(c.package, c.seed) for c in cells] == [("process", 1), ("process", 2), ("commit", 1), ("commit", 2)]
    by_pkg = {c.package: suite.cell_specs(c) for c in cells}
    assert by_pkg == {"process": ["kill-executor", "kill-driver", "kill-broker"],
                      "commit": ["kill-driver-in-commit-window"]}
    argv = suite.run_command(cells[0], Path("/r"), [])
    assert argv[argv.index("--pipeline-cmd") + 1] == JOB and "--sink" not in argv and "--workload" not in argv
    assert argv[argv.index("--test-name") + 1] == "user-orders_job-process"
    # every spec a run gets is one a --pipeline-cmd run accepts (no usage error in the cell)
    for c in cells:
        TestConfig(pipeline_cmd=JOB, nemesis=suite.cell_specs(c), time_limit=c.time_limit).validate()
    dropped = suite.left_out(cells)
    assert {(d["package"], d["spec"]) for d in dropped} == {
        ("process", "zombie-task:precommit"), ("process", "zombie-task:preinit"), ("process", "restart-mid-txn"),
        ("commit", "commit-delay:precommit"), ("commit", "commit-delay:notify"), ("commit", "commit-delay:txn-timeout")}
    assert all(d["sut"] == "user:orders_job" and d["why"].startswith("needs ") for d in dropped)
    assert suite.user_label("{python} -m my.job") == "user:job"


def test_bundled_sinks_narrowing_is_listed_too_and_the_full_sink_drops_nothing():
    cells = suite.plan_cells(sinks_=["eos", "at-least-once"], workloads=["keyed"], package_names=["process"],
                             test_count=1, time_limit=30)
    dropped = suite.left_out(cells)
    assert {(d["sut"], d["spec"]) for d in dropped} == {("at-least-once", "zombie-task:precommit"),
                                                         ("at-least-once", "zombie-task:preinit"),
                                                         ("at-least-once", "restart-mid-txn")}


def test_a_user_pipeline_with_no_fault_it_can_take_is_refused(monkeypatch):
    monkeypatch.setitem(packages.PACKAGES, "hooks-only", ("commit-delay:precommit", "zombie-task:preinit"))
    with pytest.raises(ValueError, match="can take none of the faults of hooks-only: commit-delay:precommit"):
        suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["hooks-only"], test_count=1,
                         time_limit=30, pipeline_cmd=JOB)
    with pytest.raises(ValueError, match="drop --mutants"):
        suite.plan_cells(sinks_=[], workloads=["keyed"], package_names=[], test_count=1, time_limit=30,
                         mutants=True, pipeline_cmd=JOB)


def test_a_suite_on_a_backend_narrows_each_package_to_what_the_backend_performs():
    from onceproof.backends import capabilities, registry
    from onceproof.harness.suite import cell_specs, left_out, run_command

    ssh = capabilities.of_class(registry.backend_class("ssh"))
    cells = suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["process", "network", "lossy"],
                             test_count=1, time_limit=30, performs=ssh)
    specs = {c.package: cell_specs(c) for c in cells}
    assert "zombie-task:precommit" not in specs["process"] and "kill-executor" in specs["process"]
    assert specs["network"] == ["partition", "slow-network:bandwidth"]  # the one slowdown tc makes
    assert specs["lossy"] == ["lossy-link:drop"]
    assert "--nemesis lossy-link:drop" in " ".join(run_command(cells[2], Path("/r"), ["--backend", "ssh"]))
    why = {d["spec"]: d["why"] for d in left_out(cells)}
    assert why["zombie-task:precommit"] == "the backend cannot perform it"
    assert why["slow-network"] == "the backend performs only slow-network:bandwidth"
    # the default backend: every fault of the packages, nothing left out
    local = suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["network"], test_count=1,
                             time_limit=30)
    assert cell_specs(local[0]) == ["partition", "slow-network"] and left_out(local) == []
    clock = suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["clock"], test_count=1,
                             time_limit=30, performs=ssh)  # libfaketime on the nodes (backends/ssh/clock.py)
    assert {s.split(":")[0] for s in cell_specs(clock[0])} == {"clock-skew", "driver-clock-skew"}, cell_specs(clock[0])
    with pytest.raises(ValueError, match="backend can perform"):  # a toxiproxy latency toxic: no proxy on ssh
        suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["stale-requests"], test_count=1,
                         time_limit=30, performs=ssh)
