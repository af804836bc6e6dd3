"""``onceproof-node.py`` on real nodes (``backends/ssh/node_helper.py`` shipped by ``backends/ssh/node.py``):
processes started, seen, paused, killed with evidence; and the teardown the issue asks for on every exit
path, a SIGKILLed harness included: the node's watchdog sweeps processes and iptables chains when the
lease's channel closes, or when the heartbeat stops.

Two ``onceproof/node`` containers reached over SSH only (``tests/docker/ssh_nodes.py``); about 40 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from onceproof.backends.ssh import inventory
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.transport import SshHub
from tests.docker.ssh_nodes import nodes  # noqa: F401 (a fixture, used by name)

pytestmark = pytest.mark.docker


def _run_id() -> str:
    return uuid.uuid4().hex[:12]


def _leftovers(remote, run_id: str) -> dict:
    """What of ``run_id`` is left on the node: tagged processes and OP- chains (read as root)."""
    script = ("import os,sys\nw=b'ONCEPROOF_RUN='+sys.argv[1].encode()\nfor d in os.listdir('/proc'):\n"
              " if d.isdigit():\n  try:\n   e=open('/proc/%s/environ'%d,'rb').read().split(b'\\0')\n"
              "  except OSError:\n   continue\n  if w in e: print(d)\n")
    procs = remote.run(["python3", "-c", script, run_id], root=True).check().stdout.split()
    chains = [ln for ln in remote.run(["iptables", "-w", "-S"], root=True).check().stdout.splitlines()
              if f"OP-{run_id[:8]}" in ln]
    return {"procs": procs, "chains": chains}


def _wait_clean(remote, run_id: str, within_s: float) -> float:
    t0 = time.monotonic()
    while True:
        left = _leftovers(remote, run_id)
        if not left["procs"] and not left["chains"]:
            return time.monotonic() - t0
        if time.monotonic() - t0 > within_s:
            pytest.fail(f"after {within_s} s the node still has {left}")
        time.sleep(0.5)


def _chain(remote, run_id: str) -> None:
    chain = f"OP-{run_id[:8]}-IN"
    remote.run(["iptables", "-w", "-N", chain], root=True).check()
    remote.run(["iptables", "-w", "-A", chain, "-p", "tcp", "--dport", "9092", "-j", "DROP"], root=True).check()
    remote.run(["iptables", "-w", "-I", "INPUT", "1", "-j", chain], root=True).check()


def test_processes_started_seen_paused_killed_and_swept(nodes):
    inv = inventory.load(nodes.nodes_toml)
    run = _run_id()
    with SshHub(inv) as hub:
        r = hub.remote("n1")
        h = NodeHelper(r, inv.root, run, root_commands=True)
        h.install()
        assert r.run(["stat", "-c", "%U", str(inv.root)]).check().stdout.strip() == "op"

        pid = h.start("sleeper", ["sleep", "300"], log=h.run_dir / "logs" / "sleeper.log")
        assert h.status("sleeper") == {"pid": pid, "state": "sleeping", "exit": None}
        assert h.signal("sleeper", "STOP")["sent"]
        assert h.status("sleeper")["state"] == "stopped"
        h.signal("sleeper", "CONT")
        assert h.status("sleeper")["state"] == "sleeping"
        assert h.signal("sleeper", "KILL")["sent"]
        time.sleep(0.5)
        st = h.status("sleeper")
        assert st["state"] == "gone" and st["exit"]["signal"] == 9, st
        assert h.signal("sleeper", "KILL") == {"sent": False, "why": "gone", "pid": pid}

        # output goes to the log; the environment carries the run's tag and the given variables
        h.start("talker", ["sh", "-c", 'echo "run=$ONCEPROOF_RUN x=$X"; exec sleep 300'],
                log=h.run_dir / "logs" / "talker.log", env={"X": "a b"})
        time.sleep(0.5)
        assert r.run(["cat", str(h.run_dir / "logs" / "talker.log")]).stdout.strip() == f"run={run} x=a b"

        # a group with a child, and a process that left the group (setsid): the sweep gets all of them
        h.start("family", ["sh", "-c", "sleep 301 & setsid sleep 302 & exec sleep 303"],
                log=h.run_dir / "logs" / "family.log")
        _chain(r, run)
        time.sleep(0.5)
        assert len(_leftovers(r, run)["procs"]) == 4 and _leftovers(r, run)["chains"]
        swept = h.sweep()
        assert {g["name"] for g in swept["groups_killed"]} == {"talker", "family"}
        assert swept["chains_removed"] == [f"OP-{run[:8]}-IN"] and swept["left"] == []
        assert _leftovers(r, run) == {"procs": [], "chains": []}
        assert "OP-" not in r.run(["iptables", "-w", "-S", "INPUT"], root=True).stdout
        # idempotent
        assert h.sweep()["groups_killed"] == []


def test_a_sigkilled_harness_leaves_nothing_on_the_node(nodes, tmp_path):
    """The harness is a separate process that installs, arms the watchdog, holds the lease, starts tagged
    processes and a chain, then is SIGKILLed: the node is clean within the grace plus a few seconds."""
    run = _run_id()
    script = tmp_path / "harness.py"
    script.write_text(f"""
import sys, time
from onceproof.backends.ssh import inventory
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.transport import SshHub
inv = inventory.load({str(nodes.nodes_toml)!r})
hub = SshHub(inv)
r = hub.remote("n2")
h = NodeHelper(r, inv.root, {run!r}, root_commands=True)
h.install()
h.arm_watchdog(lease_s=60)
lease = h.hold()
h.start("broker", ["sleep", "600"], log=h.run_dir / "broker.log")
h.start("worker", ["sh", "-c", "setsid sleep 601 & exec sleep 602"], log=h.run_dir / "worker.log")
r.run(["iptables", "-w", "-N", "OP-{run[:8]}-OUT"], root=True).check()
r.run(["iptables", "-w", "-I", "OUTPUT", "1", "-j", "OP-{run[:8]}-OUT"], root=True).check()
print("ready", flush=True)
time.sleep(600)
""")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "ready"
    except BaseException:
        p.kill()
        raise
    inv = inventory.load(nodes.nodes_toml)
    with SshHub(inv) as hub:
        r = hub.remote("n2")
        before = _leftovers(r, run)
        assert len(before["procs"]) == 3 and before["chains"], before
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        took = _wait_clean(r, run, within_s=15)
        h = NodeHelper(r, inv.root, run)
        swept = r.run(["cat", str(h.run_dir / "swept.json")]).check().stdout
        assert '"by": "watchdog"' in swept and f"OP-{run[:8]}-OUT" in swept, swept
        assert r.run(["pgrep", "-f", "[o]nceproof-node.py watchdog"]).returncode == 1, "the watchdog did not end"
    print(f"node clean {took:.1f} s after the harness's SIGKILL")


def test_a_silent_harness_is_swept_after_the_lease_and_a_released_one_is_not(nodes):
    inv = inventory.load(nodes.nodes_toml)
    with SshHub(inv) as hub:
        r = hub.remote("n1")
        # silent: the channel stays open but no beat comes (a harness hung, or cut off without a reset)
        run = _run_id()
        h = NodeHelper(r, inv.root, run, root_commands=True)
        h.install()
        h.arm_watchdog(lease_s=5)
        lease = h.hold()
        lease._stop.set()  # the heartbeat thread stops; the channel is kept
        h.start("broker", ["sleep", "600"], log=h.run_dir / "broker.log")
        t0 = time.monotonic()
        _wait_clean(r, run, within_s=15)
        assert time.monotonic() - t0 >= 2.0, "swept before the lease ran out"
        lease.stream.close()

        # released: the run ended on purpose; the watchdog leaves and sweeps nothing
        run = _run_id()
        h = NodeHelper(r, inv.root, run, root_commands=True)
        h.arm_watchdog(lease_s=5)
        lease = h.hold()
        h.start("keeper", ["sleep", "600"], log=h.run_dir / "keeper.log")
        lease.release()
        time.sleep(8)
        assert h.status("keeper")["state"] == "sleeping"
        assert r.run(["test", "-e", str(h.run_dir / "swept.json")]).returncode == 1
        h.sweep()
        assert _leftovers(r, run)["procs"] == []


def test_the_relay_keeps_the_run_files_in_step_with_a_node(nodes, tmp_path):
    """``backends/ssh/relay.py`` against a real node: a hook armed here reaches the node and goes when the
    node consumes it; the node's control file, sink lines (whole lines only) and checkpoint come back."""
    from onceproof.backends.ssh.relay import RunFilesRelay
    from onceproof.pipeline import hooks

    inv = inventory.load(nodes.nodes_toml)
    run = _run_id()
    local = tmp_path / "run"
    (local / "control").mkdir(parents=True)
    with SshHub(inv) as hub:
        r = hub.remote("n2")
        remote_run = inv.root / "runs" / run
        NodeHelper(r, inv.root, run).install()
        r.run(["mkdir", "-p", str(remote_run / "control"), str(remote_run / "checkpoint" / "offsets")]).check()
        relay = RunFilesRelay({"n2": r}, remote_run, local, driver="n2")
        (local / "control" / hooks.ARMED).write_text("")
        relay.sync_once()
        assert r.run(["test", "-e", str(remote_run / "control" / hooks.ARMED)]).returncode == 0
        # the node's driver consumes the hook and opens the window; a task writes two lines and half a third
        script = (f'rm "{remote_run}/control/{hooks.ARMED}"; echo \'{{"batch": 3}}\' > "{remote_run}/control/'
                  f'{hooks.OPEN}"; printf \'{{"e":1}}\\n{{"e":2}}\\n{{"e":\' >> "{remote_run}/sink.jsonl"; '
                  f'echo v1 > "{remote_run}/checkpoint/offsets/0"')
        r.run(["sh", "-c", script]).check()
        relay.sync_once()
        assert not (local / "control" / hooks.ARMED).exists()
        assert (local / "control" / hooks.OPEN).read_text() == '{"batch": 3}\n'
        assert (local / "sink.jsonl").read_text() == '{"e":1}\n{"e":2}\n'
        assert (local / "checkpoint" / "offsets" / "0").read_text() == "v1\n"
        r.run(["sh", "-c", f"printf '3}}\\n' >> \"{remote_run}/sink.jsonl\""]).check()
        relay.sync_once()
        assert (local / "sink.jsonl").read_text() == '{"e":1}\n{"e":2}\n{"e":3}\n'
        # the harness handled the open window and removed it: the node's copy goes
        (local / "control" / hooks.OPEN).unlink()
        relay.sync_once()
        assert r.run(["test", "-e", str(remote_run / "control" / hooks.OPEN)]).returncode == 1
        assert relay.errors == []
