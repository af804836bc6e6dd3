"""The session's pure parts on synthetic data: the command spool, the state file, manual faults (a fault
object that only records its calls: no cluster), durations, and a schedule's per-fault hold."""

from __future__ import annotations

import json
import os
import random
import shlex
import threading
import time

import pytest

from onceproof.harness.cli.session import parse_duration
from onceproof.harness.config import read_schedule
from onceproof.harness.session.spool import Spool, SpoolTimeout
from onceproof.harness.session.state import SessionState, find
from onceproof.nemesis.fault import EFFECTIVE, NemesisContext, Outcome, hold
from onceproof.nemesis.manual import ManualFaultError, ManualNemesis
from onceproof.store.history import HistoryWriter


def test_commands_are_answered_in_order_and_a_reply_ends_the_wait(tmp_path):
    sp = Spool(tmp_path / "spool")
    a, b = sp.send("nemesis", {"f": "kill-broker"}), sp.send("stop")
    assert [c.cmd for c in sp.pending()] == ["nemesis", "stop"] and sp.pending()[0].args == {"f": "kill-broker"}
    sp.answer(a, {"ok": True, "message": "injected"})
    assert [c.name for c in sp.pending()] == [b]
    assert sp.wait(a, 1.0) == {"ok": True, "message": "injected"}
    with pytest.raises(SpoolTimeout, match="no answer in"):
        sp.wait(b, 0.3)
    with pytest.raises(SpoolTimeout, match="supervisor is gone"):
        sp.wait(b, 5.0, alive=lambda: False)
    (sp.commands / "0-bad.json").write_text("{not json")
    assert [c.name for c in sp.pending()] == [b]
    assert json.loads((sp.replies / "0-bad.json").read_text())["ok"] is False


def test_the_state_file_finds_the_newest_live_session_with_a_live_supervisor(tmp_path):
    old, new = SessionState(tmp_path, "20260101T000000-1"), SessionState(tmp_path, "20260101T000001-2")
    me = __import__("psutil").Process()
    old.update(state="up", pid=me.pid, pid_created=me.create_time())
    new.update(state="up", pid=2**22 + 7, pid_created=1.0)  # no such process: its supervisor died
    assert find(tmp_path).sid == old.sid and old.supervisor_alive() and not new.supervisor_alive()
    assert find(tmp_path, live_only=False).sid == new.sid
    new.update(state="finished")
    assert new.read()["state"] == "finished" and find(tmp_path, "nope") is None


@pytest.mark.parametrize("text,want", [("30s", 30.0), ("2m", 120.0), ("1h", 3600.0), ("45", 45.0), ("500ms", 0.5)])
def test_durations(text, want):
    assert parse_duration(text) == want


@pytest.mark.parametrize("text", ["", "x", "-3s", "0", "3 days"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


class Held:
    """A fault that holds ``ctx.hold_s`` (as every start/stop fault does, ``nemesis/fault.py`` hold) and
    records its calls."""

    def __init__(self, name):
        self.name, self.calls = name, []

    def invoke(self, ctx, rng: random.Random) -> Outcome:
        self.calls.append(("invoke", ctx.hold_s))
        held = hold(ctx, ctx.hold_s)
        return Outcome(EFFECTIVE, "broker-1", {"held_s": held})

    def heal(self, ctx) -> None:
        self.calls.append(("heal",))


def _manual(tmp_path):
    made = {}

    def build(spec):
        made[spec] = Held(spec)
        return made[spec]

    ctx = NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path)
    hist = HistoryWriter(tmp_path / "nemesis.jsonl")
    return ManualNemesis(ctx, hist, build, elapsed=lambda: 12.5), made, hist


def _wait_ops(nem, n, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while len(nem.ops) < n and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_timed_fault_ends_by_itself_and_a_held_one_at_heal_each_an_op_marked_manual(tmp_path):
    nem, made, hist = _manual(tmp_path)
    inv = nem.inject("pause-broker:one", 0.2, command="c1")
    assert inv["manual"] and inv["at_s"] == 12.5 and inv["for_s"] == 0.2 and nem.in_flight == "pause-broker:one"
    _wait_ops(nem, 1)
    assert nem.ops[0]["outcome"] == EFFECTIVE and nem.ops[0]["manual"] and nem.in_flight is None
    nem.inject("kill-broker:leader", None)
    assert made["kill-broker:leader"].calls[0][1] > 3600  # until healed
    with pytest.raises(ManualFaultError, match="still in effect"):
        nem.inject("kill-broker:one", 1.0)
    t = time.monotonic()
    healed, errors = nem.heal("kill-broker")
    assert healed == ["kill-broker:leader"] and not errors and time.monotonic() - t < 2.0
    assert ("heal",) in made["kill-broker:leader"].calls and nem.active() == []
    sched = nem.schedule()["faults"]
    assert sched[0] == {"at_s": 12.5, "f": "pause-broker:one", "rng": "manual-0", "hold_s": 0.2}
    assert sched[1]["f"] == "kill-broker:leader" and 0 <= sched[1]["hold_s"] < 2.0  # held until its heal
    hist.close()
    ops = [json.loads(line) for line in (tmp_path / "nemesis.jsonl").read_text().splitlines()]
    assert [o["type"] for o in ops if o["f"] != "heal"] == ["invoke", "info", "invoke", "info"]


def test_stop_and_heal_ends_every_fault_heals_each_once_and_refuses_new_ones(tmp_path):
    nem, made, _ = _manual(tmp_path)
    nem.inject("pause-broker:one", None)
    nem.inject("kill-driver", None)
    assert not nem.stop_and_heal(join_timeout_s=5.0)
    assert all(("heal",) in f.calls for f in made.values()) and nem.active() == []
    with pytest.raises(ManualFaultError, match="stopping"):
        nem.inject("kill-executor", 1.0)


def test_a_schedule_may_give_each_fault_its_own_hold(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"faults": [{"at_s": 1, "f": "kill-broker:leader", "hold_s": 10},
                                        {"at_s": 2, "f": "pause-broker"}]}))
    assert [f["hold_s"] for f in read_schedule(p)] == [10.0, None]
    p.write_text(json.dumps({"faults": [{"at_s": 1, "f": "kill-broker", "hold_s": -1}]}))
    with pytest.raises(ValueError, match="hold_s must be a number > 0"):
        read_schedule(p)


def test_the_runner_holds_a_scheduled_fault_for_its_own_hold(tmp_path):
    from onceproof.nemesis.runner import NemesisRunner

    f = Held("pause-broker")
    ctx = NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path, hold_s=6.0)
    nr = NemesisRunner({"pause-broker": f}, [(0.0, "pause-broker"), (0.0, "pause-broker")], ctx,
                       HistoryWriter(tmp_path / "n.jsonl"), seed=1, holds=[0.05, None], recover_max_s=0.1)
    done = threading.Event()
    nr.on_op = lambda op: done.set() if len(nr.ops) == 2 else None
    nr.start(progress=lambda: 1)
    deadline = time.monotonic() + 2.0
    while len(f.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    nr.stop_and_heal(join_timeout_s=5.0)
    assert f.calls[0] == ("invoke", 0.05) and f.calls[1] == ("invoke", 6.0)
    assert os.path.exists(tmp_path / "n.jsonl")


def test_the_commands_session_start_prints_reach_a_session_under_another_results_root(tmp_path, monkeypatch):
    """`session start --results DIR` printed `onceproof nemesis ...` without `--results`, which then looked
    under ./results and found no session (issue 41). The printed commands, run as typed from elsewhere, reach it."""
    from typer.testing import CliRunner

    from onceproof.harness import cli
    from onceproof.harness.cli import session as session_cli
    from onceproof.store.runs import DEFAULT_ROOT

    root = tmp_path / "my results"
    me = __import__("psutil").Process()
    SessionState(root, "20260101T000000-1").update(state="up", pid=me.pid, pid_created=me.create_time(),
                                                   run_dir=str(tmp_path))
    monkeypatch.chdir(tmp_path)  # ./results is not the session's root
    sent = []
    monkeypatch.setattr(session_cli, "_send", lambda s, cmd, args, t: sent.append((s.sid, cmd)) or
                        {"ok": True, "f": args["f"], "at_s": 1.0, "index": 0})
    monkeypatch.setattr(session_cli, "_wait_info", lambda *a: None)
    break_it = session_cli.session_command("onceproof nemesis kill-broker:leader --for 10s", root)
    status = session_cli.session_command("onceproof session status", root)
    assert "--results" in break_it and str(root) in break_it
    r = CliRunner().invoke(cli.app, shlex.split(break_it)[1:])
    assert r.exit_code == 0, r.output
    assert sent == [("20260101T000000-1", "nemesis")]
    r = CliRunner().invoke(cli.app, [*shlex.split(status)[1:], "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["state"] == "up", r.output
    # under the default root the commands stay as short as before
    assert session_cli.session_command("onceproof session stop", DEFAULT_ROOT) == "onceproof session stop"
