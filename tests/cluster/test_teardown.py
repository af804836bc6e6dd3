"""Everything started is stopped: Ctrl-C or SIGTERM at every phase of a run (even when the harness
inherited SIGINT ignored, as a background CI step does), and `cluster up` / `cluster down`."""

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ONCEPROOF, REPO, our_jvms, our_processes, run_cli

pytestmark = pytest.mark.cluster


def _started_with_sigint_ignored():
    # What `cmd &` in a script or a CI runner does: the child inherits SIGINT as SIG_IGN. The harness
    # must install its handler anyway (issue 7 item 13).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ops(run: Path) -> int:
    try:
        with (run / "history.jsonl").open() as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _moment_reached(moment: str, run: Path | None, lines: list[str]) -> bool:
    if run is None:
        return False
    out = "\n".join(lines)
    return {
        "proxy-start": lambda: (run / "logs" / "toxiproxy.log").exists(),
        "kafka-start": lambda: (run / "logs" / "broker-1.out").exists(),
        "spark-start": lambda: (run / "logs" / "driver-1.log").exists(),
        # the first progress line prints at 0 s: wait until the history holds real traffic
        "mid-run": lambda: (run / "control" / "driver.ready").exists() and _ops(run) > 50,
        "heal": lambda: "stopping workload and healing faults" in out,
        "check": lambda: "recovery finished" in out or "recovery did not finish" in out,
    }[moment]()


def _start(results_root: Path, extra: list[str]):
    """The harness as a CI step starts it (SIGINT inherited ignored), its output collected in ``lines``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="160")
    proc = subprocess.Popen([*ONCEPROOF, "run", "--results", str(results_root), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=_started_with_sigint_ignored)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    return proc, lines, reader


def _wait_for(moment: str, proc: subprocess.Popen, lines: list[str], results_root: Path) -> Path:
    """Wait (≤ 400 s) until the run reaches ``moment``; returns its run directory."""
    run = None
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if run is None and (results_root / "latest").exists():
            run = (results_root / "latest").resolve()
        if _moment_reached(moment, run, lines):
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before the moment: " + "".join(lines)[-3000:]
    assert _moment_reached(moment, run, lines), f"never reached {moment}: " + "".join(lines)[-3000:]
    return run


MOMENTS = {  # moment -> (extra run options, signal)
    "proxy-start": (["--proxy"], signal.SIGINT),
    "kafka-start": ([], signal.SIGINT),
    "spark-start": ([], signal.SIGINT),
    "mid-run": (["--nemesis", "kill-executor", "--time-limit", "600"], signal.SIGINT),
    "heal": (["--nemesis", "kill-broker:one", "--nemesis-interval", "3", "--fault-hold", "20",
              "--time-limit", "15"], signal.SIGINT),
    "check": (["--time-limit", "8"], signal.SIGTERM),
}


# make test interrupts at each start and mid-run; the interrupts in the heal and the check (170 s) are in
# make test-extended, for make test's time budget
@pytest.mark.parametrize("moment", [pytest.param(m, marks=pytest.mark.extended) if m in ("heal", "check") else m
                                    for m in MOMENTS])
def test_interrupt_leaves_nothing_and_keeps_the_history(results_root, moment):
    """Interrupt a run at each phase: the harness exits 255 within the stated bound, results.json says
    why, and no process of the run (broker, toxiproxy, driver, executor, PySpark worker) is left."""
    from onceproof.harness.teardown import TEARDOWN_BOUND_S

    extra, sig = MOMENTS[moment]
    proc, lines, reader = _start(results_root, extra)
    run = None
    try:
        run = _wait_for(moment, proc, lines, results_root)
        t_sig = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=TEARDOWN_BOUND_S + 30)
        took = time.monotonic() - t_sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    out = "".join(lines)
    assert proc.returncode == 255, out[-3000:]
    assert took <= TEARDOWN_BOUND_S + 15, f"exit took {took:.0f}s after the signal"
    result = json.loads((run / "results.json").read_text())
    want = "terminated" if sig == signal.SIGTERM else "interrupted"
    assert result["verdict"] == "crashed" and want in result["error"], result.get("error")
    assert not result["teardown"]["errors"], result["teardown"]
    if moment in ("mid-run", "heal", "check"):
        assert sum(1 for _ in (run / "history.jsonl").open()) > 10
    deadline = time.monotonic() + 15
    while our_processes(str(run)) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = our_processes(str(run))
    assert not left, [(p.pid, p.cmdline()[:4]) for p in left]


def test_a_sigkilled_harness_leaves_nothing_within_seconds(results_root):
    """SIGKILL of the harness mid-run (no teardown can run): PR_SET_PDEATHSIG takes the brokers, toxiproxy
    and the Python driver, and the run's reaper (backends/common/reaper.py) the driver's JVM, its
    executors and their Python workers, which would otherwise write on into whatever runs next. With
    ``--sink postgres``, also the PostgreSQL server (its backends fork from it) and its data directory."""
    proc, lines, reader = _start(results_root, ["--sink", "postgres", "--nemesis", "kill-executor",
                                                "--time-limit", "600"])
    try:
        run = _wait_for("mid-run", proc, lines, results_root)
        assert our_jvms(str(run)), "no JVM of the run to leave behind"
        servers = [p for p in our_processes(str(run)) if "postgres" in (p.info.get("cmdline") or [""])[0]]
        assert servers, "no postgres server of the run to leave behind"
        scratch = (run / "scratch-dirs.txt").read_text().split()
        assert scratch and all(Path(d).is_dir() for d in scratch), scratch
        proc.kill()
        proc.wait(timeout=10)
        t_kill = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    while our_processes(str(run)) and time.monotonic() < t_kill + 20:
        time.sleep(0.5)
    left = our_processes(str(run))
    assert not left, [(p.pid, p.cmdline()[:4]) for p in left]
    assert not any(Path(d).exists() for d in scratch), f"the server's data directory outlived the harness: {scratch}"


def test_cluster_up_status_down(tmp_path):
    d = tmp_path / "cluster"
    up = run_cli(["cluster", "up", "--dir", str(d)], timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        bootstrap = up.stdout.strip().splitlines()[-1]
        assert bootstrap.count("127.0.0.1:") == 3
        st = run_cli(["cluster", "status", "--dir", str(d)])
        assert st.returncode == 0 and st.stdout.count(" up") == 3, st.stdout
        again = run_cli(["cluster", "up", "--dir", str(d)], timeout=60)
        assert again.returncode == 1 and "already running" in again.stdout
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert len(md.brokers) == 3
    finally:
        down = run_cli(["cluster", "down", "--dir", str(d)], timeout=120)
    assert down.returncode == 0
    assert not our_jvms(str(d))
    st = run_cli(["cluster", "status", "--dir", str(d)])
    assert st.returncode == 1 and "down" in st.stdout
