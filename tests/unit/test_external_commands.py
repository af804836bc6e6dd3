"""``backends/external/commands.py`` (fault-map commands on the harness's machine, with a deadline that ends
them) and ``backends/external/ledger.py`` (the pending heals), with real local processes."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from onceproof.backends.external.commands import CommandRunner, LocalRemote
from onceproof.backends.external.fault_map import Command
from onceproof.backends.external.ledger import PendingHeals
from onceproof.backends.ssh.remote import RemoteError
from onceproof.secrets import Secret, Secrets


def test_a_local_command_returns_its_status_and_output():
    done = LocalRemote().run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout_s=10)
    assert (done.returncode, done.stdout, done.stderr, done.node) == (3, "out\n", "err\n", "local")
    assert not done.timed_out


def test_the_deadline_ends_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child"
    t0 = time.monotonic()
    done = LocalRemote().run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout_s=1)
    assert done.timed_out and time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the command's child outlived its deadline"
        time.sleep(0.1)


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace():
    t0 = time.monotonic()
    done = LocalRemote().run(["sh", "-c", "trap '' TERM; sleep 30"], timeout_s=0.5)
    assert done.timed_out and 5 <= time.monotonic() - t0 < 15


def test_a_missing_program_and_an_unknown_target_are_errors_naming_them():
    with pytest.raises(RemoteError, match="no-such-program-xyz"):
        LocalRemote().run(["no-such-program-xyz"])
    with pytest.raises(RemoteError, match="ssh:op@h: no such command target"):
        CommandRunner().run(Command(argv=("true",), where="ssh:op@h"))


def test_the_runner_scrubs_the_secrets_from_what_a_command_prints():
    runner = CommandRunner(secrets=Secrets([Secret("hunter2-pw")]))
    done = runner.run(Command(argv=("sh", "-c", "echo login hunter2-pw; echo hunter2-pw >&2; exit 1")))
    assert done.returncode == 1
    assert "hunter2-pw" not in done.stdout + done.stderr and "***" in done.stdout and "***" in done.stderr


def test_the_ledger_drains_newest_first_and_keeps_what_failed(tmp_path):
    ledger = PendingHeals(tmp_path)
    assert ledger.entries() == []
    log = tmp_path / "healed"
    a = ledger.add("pause-broker:one", Command(argv=("sh", "-c", f"echo a >> {log}")))
    ledger.add("kill-broker:leader", Command(argv=("sh", "-c", f"echo b >> {log}; exit 7")))
    c = ledger.add("pause-driver", Command(argv=("sh", "-c", f"echo c >> {log}")))
    assert [e.spec for e in PendingHeals(tmp_path).entries()] == ["pause-broker:one", "kill-broker:leader",
                                                                  "pause-driver"]
    out = ledger.drain(CommandRunner().run)
    assert log.read_text().split() == ["c", "b", "a"]
    assert [(e.token, d.returncode) for e, d in out][::2] == [(c, 0), (a, 0)]
    left = ledger.entries()
    assert [e.spec for e in left] == ["kill-broker:leader"] and left[0].heal.argv[0] == "sh"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_heal_that_cannot_start_stays_pending_and_the_others_run(tmp_path):
    ledger = PendingHeals(tmp_path)
    ledger.add("kill-broker:one", Command(argv=("no-such-program-xyz",)))
    ok = ledger.add("pause-broker:one", Command(argv=("true",)))
    out = ledger.drain(CommandRunner().run)
    assert isinstance(out[1][1], RemoteError) and out[0][0].token == ok
    assert [e.spec for e in ledger.entries()] == ["kill-broker:one"]


def test_a_broken_ledger_names_itself(tmp_path):
    (tmp_path / "faults-pending.json").write_text("[{")
    with pytest.raises(ValueError, match="faults-pending.json: not a pending-heal ledger"):
        PendingHeals(tmp_path).entries()


# ------------------------------------------------------------------ ExternalCluster without a cluster

def _cluster(tmp_path, faults: str):
    from onceproof.backends.external import cluster_file
    from onceproof.backends.external.kafka import ExternalCluster
    text = f"""
[kafka]
bootstrap = "127.0.0.1:1"
[kafka.brokers]
1 = {{ host = "k1" }}
[spark]
bootstrap = "k1:9092"
master = "spark://m:7077"
submit = "true {{job_args}}"
[spark.files]
harness_path = "{tmp_path}"
cluster_path = "/mnt/run"
{faults}
"""
    p = tmp_path / "cluster.toml"
    p.write_text(text)
    return ExternalCluster(cluster_file.load(p, env={}), tmp_path, CommandRunner(), "abcdef123456")


def test_a_closed_port_does_not_answer_within_the_probe():
    from onceproof.backends.external.kafka import answers
    t0 = time.monotonic()
    assert answers("127.0.0.1:1", timeout_s=1.0) is False
    assert time.monotonic() - t0 < 5


def test_up_names_the_bootstrap_and_the_fix_when_nothing_answers(tmp_path):
    from onceproof.backends.base import ClusterError
    c = _cluster(tmp_path, "")
    with pytest.raises(ClusterError, match=r"no answer from 127.0.0.1:1 .*fix \[kafka\] bootstrap"):
        c.up(timeout_s=3)


def test_a_failing_fault_command_is_an_error_and_leaves_no_pending_heal(tmp_path):
    from onceproof.backends.base import ClusterError
    c = _cluster(tmp_path, '[faults.pause-broker]\nrun = "sh -c \'echo nope >&2; exit 4\'"\n'
                           'heal = "true"\n')
    with pytest.raises(ClusterError, match=r"\[faults.pause-broker\] for broker 1 exited 4: nope"):
        c.pause(1)
    assert c.ledger.entries() == [] and c.commands[0]["returncode"] == 4


def test_a_pause_is_healed_by_down_and_recorded_as_evidence(tmp_path):
    log = tmp_path / "ops"
    c = _cluster(tmp_path, f'[vars]\nlog = "{log}"\n[faults.pause-broker]\n'
                           f'run = "sh -c \'echo pause {{broker_id}} {{host}} >> {{log}}\'"\n'
                           f'heal = "sh -c \'echo unpause {{broker_id}} >> {{log}}\'"\n')
    c._addresses = {1: "127.0.0.1:1"}  # what up() reads from the metadata; nothing listens there
    c.pause(1)
    assert [e.spec for e in c.ledger.entries()] == ["pause-broker:1"]
    assert c.state(1).status == "stopped"  # it does not answer, and onceproof paused it
    assert c.down() == []
    assert log.read_text().splitlines() == ["pause 1 k1", "unpause 1"]
    assert c.ledger.entries() == [] and c.state(1).status == "gone"


def test_start_without_a_kill_broker_entry_names_the_table_to_add(tmp_path):
    from onceproof.backends.base import ClusterError
    c = _cluster(tmp_path, "")
    with pytest.raises(ClusterError, match=r"add \[faults.kill-broker\]"):
        c.start(1)


# ------------------------------------------------------------------ the driver through the submit template

def _wait(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _written(path) -> bool:
    """``path`` holds a whole line (the shell's ``echo ... >`` creates the file before it writes it)."""
    return path.exists() and path.read_text().endswith("\n")


def test_the_template_supervisor_restarts_a_killed_incarnation_and_stops_the_last(tmp_path):
    from onceproof.backends.external.driver import TemplateDriverSupervisor

    def render(n: int) -> Command:  # stands in for `docker compose run ...`: a process that lives until killed
        return Command(argv=("sh", "-c", f'echo "$ONCEPROOF_DRIVER_INCARNATION $SECRET_VAR" > {tmp_path}/env-{n}; '
                                         f'sleep 60 & echo $! > {tmp_path}/pid-{n}; wait'))

    def stop_driver(n: int) -> Command:  # stands in for `docker kill <driver-n>`
        return Command(argv=("sh", "-c", f"kill -9 $(cat {tmp_path}/pid-{n})"))

    sup = TemplateDriverSupervisor(argv=[], log_dir=tmp_path / "logs", env={"SECRET_VAR": "from-env"},
                                   render=render, stop_driver=stop_driver, run=CommandRunner().run,
                                   restart_delay_s=0.1)
    sup.start()
    try:
        # the child can write its files before the supervisor's thread records its Popen, and a file exists
        # before the shell has written it: wait for the pid recorded and both files written
        _wait(lambda: _written(tmp_path / "pid-1") and _written(tmp_path / "env-1") and sup.pid is not None)
        assert (tmp_path / "env-1").read_text().split() == ["1", "from-env"]
        first = sup.pid
        assert first is not None and sup.kill_current()
        _wait(lambda: _written(tmp_path / "pid-2") and sup.pid not in (None, first))
        assert sup.restarts() == 1 and sup.incarnations == 2
    finally:
        sup.stop()
    sleeper = int((tmp_path / "pid-2").read_text())
    _wait(lambda: not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == psutil.STATUS_ZOMBIE)
    assert [e[1] for e in sup.events] == ["start", "exit", "start"]
    assert (tmp_path / "logs" / "driver-1.log").exists() and (tmp_path / "logs" / "driver-2.log").exists()
