"""A chaos session driven the way a person drives one, each command a separate ``onceproof`` process as from
a terminal, on the real local cluster: ``session start``, ``nemesis kill-broker:leader --for 10s``,
``nemesis pause-broker``, the live view (``onceproof watch``, through textual's test pilot) captured while
the broker is paused and its ``a`` key healing it, ``heal``, ``nemesis kill-driver``, a refused fault,
``session status``, ``session stop`` → the verdict, with the manual faults in ``nemesis.jsonl`` and
``schedule.json``, and nothing left running. Then the session's schedule replayed by ``run --schedule``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ONCEPROOF, REPO, load_run_dir, our_processes, run_cli

pytestmark = pytest.mark.cluster


def _cli(results, *args, timeout=600):
    p = run_cli([*args, "--results", str(results)], timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def _start(results, *options):
    code, out = _cli(results, "session", "start", "--seed", "1", "--max-idle", "15m", *options, timeout=600)
    assert code == 0 and "is up" in out, out[-3000:]
    st = json.loads(_cli(results, "session", "status", "--json")[1])
    return st


def _view(results, keys=(), svg_to: Path | None = None) -> tuple[str, str, dict]:
    """The session's live view, driven by textual's pilot as a person at a terminal would: its screen
    (SVG), the message after ``keys`` (waited for until the supervisor answered) and the snapshot drawn."""
    from onceproof.harness.session import live
    from onceproof.harness.session.state import find
    from onceproof.harness.session.view import WatchApp

    s = find(results)

    async def drive():
        app = WatchApp(s, refresh_s=0.2)
        async with app.run_test(size=(150, 42)) as pilot:
            await pilot.pause(2.5)  # two snapshots: the rates need two points
            svg, snap, msg = app.export_screenshot(), live.read(s.live), ""
            if keys:
                await pilot.press(*keys)
                for _ in range(1200):
                    await pilot.pause(0.1)
                    msg = str(app.query_one("#message").render())
                    if "…" not in msg:
                        break
            await pilot.press("q")
        return svg, msg, snap

    svg, msg, snap = asyncio.run(drive())
    if svg_to is not None:
        svg_to.write_text(svg)
    return svg, msg, snap


@pytest.mark.extended
@pytest.mark.timeout(1500)
def test_an_eos_session_driven_by_hand_is_valid_and_its_schedule_replays(results_root):
    st = _start(results_root, "--sink", "eos")
    run_dir = st["run_dir"]
    try:
        code, out = _cli(results_root, "nemesis", "kill-broker:leader", "--for", "10s")
        assert code == 0 and "kill-broker:leader → effective" in out, out
        code, out = _cli(results_root, "nemesis", "pause-broker")
        assert code == 0 and "until `onceproof heal`" in out, out
        faults = json.loads(_cli(results_root, "session", "status", "--json")[1])["faults"]
        assert [f["f"].partition(":")[0] for f in faults] == ["pause-broker"], faults
        time.sleep(3)
        svg, msg, snap = _view(results_root, keys=("a",), svg_to=Path(run_dir) / "watch.svg")
        # the rates are drawn (a paused broker in the ISR may stall the input meanwhile: acks=all)
        assert None not in (snap["input"]["rate_per_s"], snap["output"]["rate_per_s"]), snap
        assert snap["input"]["acked"] > 0 and snap["output"]["seen"] > 0 and snap["batch"]["id"] is not None, snap
        assert [b["status"] for b in snap["brokers"]].count("stopped") == 1, snap["brokers"]
        assert [f["f"].partition(":")[0] for f in snap["faults"]] == ["pause-broker"], snap["faults"]
        assert snap["anomalies"] == {"live-duplicate": 0, "live-aborted-read": 0}, snap["anomalies"]
        for text in ("pause-broker", "paused", "live-duplicate", "open&#160;transactions"):
            assert text in svg, text
        assert "healed pause-broker" in msg, msg  # the view's `a` key: heal all
        code, out = _cli(results_root, "heal")
        assert code == 0 and "no fault was in effect" in out, out
        code, out = _cli(results_root, "nemesis", "kill-driver", "--for", "5s")
        assert code == 0 and "kill-driver → effective" in out, out
        code, out = _cli(results_root, "nemesis", "no-such-fault")
        assert code == 254 and "no-such-fault" in out, out
    finally:
        code, out = _cli(results_root, "session", "stop", timeout=1200)
    assert code == 0 and "VALID" in out, out[-3000:]
    rd, result, ops = load_run_dir(Path(run_dir))
    assert result["verdict"] == "valid" and result["stats"]["output_records"] == result["stats"]["input_records"] > 0
    done = [o for o in ops if o.get("type") == "info" and o.get("f") != "heal"]
    assert [o["f"].partition(":")[0] for o in done] == ["kill-broker", "pause-broker", "kill-driver"], done
    assert all(o["manual"] and o["outcome"] == "effective" for o in done), done
    sched = json.loads((rd / "schedule.json").read_text())["faults"]
    assert [f["f"] for f in sched] == [o["f"] for o in done] and sched[0]["hold_s"] == 10.0
    assert not our_processes(str(rd)), "a process of the session outlived its stop"

    # the session's faults on a fresh cluster
    p = run_cli(["run", "--sink", "eos", "--schedule", str(rd / "schedule.json"), "--seed", "1",
                 "--time-limit", str(max(30, int(sched[-1]["at_s"]) + 10)), "--results", str(results_root / "replay")],
                timeout=1200)
    _, again, ops2 = load_run_dir((results_root / "replay" / "latest").resolve())
    assert p.returncode == 0 and again["verdict"] == "valid", (again.get("verdict"), p.stdout[-3000:])
    assert [o["f"] for o in ops2 if o.get("type") == "info" and o.get("f") != "heal"] == [f["f"] for f in sched]


@pytest.mark.extended
@pytest.mark.timeout(1200)
def test_an_at_least_once_session_is_invalid_after_a_kill_in_the_commit_window(results_root):
    st = _start(results_root, "--sink", "at-least-once")
    try:
        code, out = _cli(results_root, "nemesis", "kill-driver-in-commit-window", "--for", "5s")
        assert code == 0 and "→ effective" in out, out
    finally:
        code, out = _cli(results_root, "session", "stop", timeout=1200)
    assert code == 1 and "INVALID" in out, out[-3000:]
    _, result, _ = load_run_dir(Path(st["run_dir"]))
    assert result["counts"]["duplicate"] > 0, result["counts"]


@pytest.mark.extended
@pytest.mark.timeout(1200)
def test_a_session_outlives_its_terminal_and_a_killed_supervisor_leaves_nothing(results_root):
    """The terminal (a shell in its own session, as a terminal window is) that started the session is
    SIGKILLed: the session is still up and stops normally. A second session's supervisor is SIGKILLed: its
    reaper stops every process, and ``session stop`` says so (255)."""
    cmd = " ".join([*ONCEPROOF, "session", "start", "--seed", "1", "--max-idle", "10m", "--results", str(results_root)])
    term = subprocess.Popen(["bash", "-c", f"{cmd}; sleep 600"], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            code, out = _cli(results_root, "session", "status", "--json")
            if code == 0 and json.loads(out).get("state") == "up":
                break
            time.sleep(2)
    finally:
        os.killpg(term.pid, signal.SIGKILL)
        term.wait(timeout=10)
    st = json.loads(_cli(results_root, "session", "status", "--json")[1])
    assert st["state"] == "up" and st["supervisor_alive"], st
    code, out = _cli(results_root, "session", "stop", timeout=1200)
    assert code == 0 and "VALID" in out, out[-3000:]
    assert not our_processes(st["run_dir"])

    st2 = _start(results_root / "second")
    os.kill(int(st2["pid"]), signal.SIGKILL)
    code, out = _cli(results_root / "second", "session", "stop", "--session", st2["id"])
    assert code == 255 and "supervisor died" in out, out
    deadline = time.monotonic() + 60
    while our_processes(st2["run_dir"]) and time.monotonic() < deadline:
        time.sleep(1)
    assert not our_processes(st2["run_dir"]), "a process of the killed session's supervisor outlived it"
