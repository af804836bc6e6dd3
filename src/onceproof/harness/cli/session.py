"""Ad hoc chaos sessions from a terminal: ``session start|status|stop``, ``nemesis``, ``heal`` and
``watch`` (:mod:`onceproof.harness.session`). Every command finds the session through its state file under
``--results`` (the newest live one, or ``--session ID``), so any terminal can drive it.

Exit codes: ``session stop`` as ``run`` (0 valid, 1 invalid, 2 unknown, 255 crashed); a refused fault,
a missing session or a bad option 254; the others 0.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from onceproof.backends.common import reaper
from onceproof.harness.cli.app import EXIT_CRASHED, EXIT_USAGE, console, on_crash, usage
from onceproof.harness.cli.run import config_from_options, run_signature
from onceproof.harness.session.spool import Spool, SpoolTimeout
from onceproof.harness.session.state import LIVE, SessionState, find, new_id
from onceproof.harness.summary import brief
from onceproof.store.runfiles import RunFiles
from onceproof.store.runs import DEFAULT_ROOT

session_app = typer.Typer(no_args_is_help=True, help="Ad hoc chaos sessions: bring the system up, break it by hand "
                                                     "(onceproof nemesis, onceproof heal), stop it for a verdict.")

NOT_FOR_SESSIONS = ("nemesis", "schedule", "nemesis_interval", "time_limit", "max_run_factor")
"""``run``'s options a session does not take: its faults come by hand and it lasts until ``stop``."""
MAX_IDLE_S = 1800.0
_RESULTS_HELP = "the results root the session was started with"
_SESSION_HELP = "the session's id (default: the newest live session under --results)"


def parse_duration(text: str) -> float:
    """``"30s"``, ``"2m"``, ``"1h"`` or ``"45"`` (seconds) → seconds. Raises ``ValueError``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
    if not m:
        raise ValueError(f"{text!r} is not a duration: write 30s, 2m, 1h or a number of seconds")
    v = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    if v <= 0:
        raise ValueError(f"{text!r}: a duration must be > 0")
    return v


def session_command(command: str, results_root: str | os.PathLike) -> str:
    """``command`` (``"onceproof nemesis ..."``) as it must be typed to reach a session started under
    ``results_root``: with ``--results ROOT`` after the subcommand unless ``results_root`` is the default
    root (``results``, or ``$ONCEPROOF_RESULTS``), where the session commands look when not told."""
    if Path(results_root).resolve() == Path(DEFAULT_ROOT).resolve():
        return command
    words = command.split(" ")
    n = 3 if words[1:2] == ["session"] else 2  # after "onceproof session stop" or "onceproof nemesis"
    return " ".join([*words[:n], "--results", shlex.quote(str(Path(results_root).resolve())), *words[n:]])


def _session(results: Path, sid: str | None, live_only: bool = True) -> SessionState:
    s = find(results, sid, live_only=live_only)
    if s is None:
        what = f"session {sid}" if sid else "live session"
        raise usage(f"no {what} under {results}: start one with `onceproof session start`"
                    + ("" if sid else ", or name it with --session"), "--session")
    return s


# ------------------------------------------------------------------------------------------- start

def start(**options: Any) -> None:
    """Start a session: the cluster, the pipeline and the workload, in the background; prints where they
    are and returns. Break it with `onceproof nemesis`, watch it, end it with `onceproof session stop`.

    Takes run's options but the fault ones (faults come by hand) and --time-limit (it runs until stopped,
    or until --max-idle passes with no command).
    """
    max_idle = options.pop("max_idle")
    options.pop("verbose", None)
    on_crash("session start", None)
    try:
        idle_s = parse_duration(max_idle)
    except ValueError as e:
        raise usage(str(e), "--max-idle") from None
    cfg = config_from_options(options)
    cfg = dataclasses.replace(cfg, results_root=Path(cfg.results_root).resolve(),
                              test_name=cfg.test_name or f"session-{cfg.name.removesuffix('-no-faults')}")
    sid = new_id()
    st = SessionState(cfg.results_root, sid)
    st.dir.mkdir(parents=True, exist_ok=True)
    argv = shlex.split(cfg.replay_command())[2:]
    env = {k: v for k, v in os.environ.items() if k != "ONCEPROOF_RUN"}
    with open(st.log, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "onceproof.harness.session.supervisor", "--results",
                                 str(cfg.results_root), "--id", sid, "--max-idle", str(idle_s), "--", *argv],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env)
    deadline = time.monotonic() + cfg.startup_timeout + 300
    with console.status(f"starting session {sid} (log: {st.log})"):
        while True:
            state = st.read()
            if state.get("state") == "up":
                break
            if proc.poll() is not None or state.get("state") in ("failed", "finished"):
                tail = "\n".join(st.log.read_text(errors="replace").splitlines()[-15:]) if st.log.exists() else ""
                console.print(f"[red]the session did not start[/] ({state.get('error') or f'exit {proc.poll()}'}); "
                              f"{st.log} ends:\n{tail}", soft_wrap=True)
                raise typer.Exit(EXIT_USAGE if proc.poll() == EXIT_USAGE else EXIT_CRASHED)
            if time.monotonic() > deadline:
                proc.terminate()  # its teardown stops what it started
                console.print(f"[red]the session was not up after {cfg.startup_timeout + 300:.0f}s[/]; stopped it. "
                              f"See {st.log}", soft_wrap=True)
                raise typer.Exit(EXIT_CRASHED)
            time.sleep(0.3)
    console.print(f"[bold]session {sid}[/] is up (pid {state['pid']}), it stops after {idle_s:.0f}s without a command")
    console.print(f"  bootstrap  {state['bootstrap']}")
    console.print(f"  spark      {state['master']} ({state['backend']} backend)")
    console.print(f"  run dir    {state['run_dir']}")
    console.print(f"  log        {st.log}")
    root = cfg.results_root
    console.print(f"  break it:  {session_command('onceproof nemesis kill-broker:leader --for 10s', root)}"
                  "   (onceproof faults lists them)", soft_wrap=True)
    console.print(f"  end it:    {session_command('onceproof session stop', root)}", soft_wrap=True)


def _start_signature() -> inspect.Signature:
    params = [p for p in run_signature().parameters.values() if p.name not in NOT_FOR_SESSIONS]
    params.append(inspect.Parameter("max_idle", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                                    default=typer.Option(f"{MAX_IDLE_S:.0f}s", "--max-idle",
                                                         help="stop and check the session after this long without "
                                                              "a command (30m, 2h, ...)")))
    return inspect.Signature(params)


start.__signature__ = _start_signature()  # type: ignore[attr-defined]
start.__annotations__ = {p.name: p.annotation for p in start.__signature__.parameters.values()}  # type: ignore


# ------------------------------------------------------------------------------------------ status

@session_app.command("status")
def status(results: Path = typer.Option(DEFAULT_ROOT, help=_RESULTS_HELP),
           session: str = typer.Option(None, help=_SESSION_HELP),
           as_json: bool = typer.Option(False, "--json", help="print the state file as JSON")) -> None:
    """What the session is doing: its state, where it is, the last committed batch, active faults."""
    on_crash("session status", None)
    s = _session(results, session, live_only=session is None)
    st = s.read()
    alive = s.supervisor_alive()
    if as_json:
        typer.echo(json.dumps({**st, "supervisor_alive": alive}))
        return
    state = st.get("state", "?") if alive or st.get("state") not in LIVE else f"{st.get('state')} (supervisor gone)"
    console.print(f"session {s.sid}: {state}")
    for k in ("run_dir", "bootstrap", "master", "batch_committed", "driver_restarts", "sends", "ops", "verdict"):
        if st.get(k) is not None:
            console.print(f"  {k:16} {st[k]}")
    for f in st.get("faults") or []:
        console.print(f"  fault in effect  {f['f']} for {f['age_s']}s"
                      + (f" of {f['for_s']}s" if f.get("for_s") else " (until healed)"))


# ------------------------------------------------------------------------------------ stop

@session_app.command("stop")
def stop(results: Path = typer.Option(DEFAULT_ROOT, help=_RESULTS_HELP),
         session: str = typer.Option(None, help=_SESSION_HELP),
         timeout: float = typer.Option(1800.0, help="seconds to wait for heal, recovery and the check")) -> None:
    """Heal everything, wait for recovery, run every checker, write the report; prints the verdict.

    Exit code: 0 valid, 1 invalid, 2 unknown, 255 crashed (also when the supervisor had died: what it
    started is stopped here).
    """
    on_crash("session stop", None)
    s = _session(results, session, live_only=False)
    st = s.read()
    if st.get("state") in LIVE and s.supervisor_alive():
        Spool(s.spool_dir).send("stop")
        deadline = time.monotonic() + timeout
        with console.status(f"stopping session {s.sid}: heal, recover, check (log: {s.log})"):
            while s.supervisor_alive() and s.read().get("state") not in ("finished", "failed"):
                if time.monotonic() > deadline:
                    console.print(f"[red]not finished after {timeout:.0f}s[/]; see {s.log}")
                    raise typer.Exit(EXIT_CRASHED)
                time.sleep(0.5)
            for _ in range(50):  # the state is written just before the supervisor exits
                if s.read().get("state") in ("finished", "failed"):
                    break
                time.sleep(0.1)
        st = s.read()
    elif st.get("state") in LIVE:  # the supervisor died (SIGKILL, OOM): its reaper stops its processes
        run_dir = st.get("run_dir")
        left = reaper.sweep(run_dir, float(st.get("pid_created") or 0)) if run_dir else []
        st = s.update(state="failed", verdict="crashed", exit=EXIT_CRASHED,
                      error="the session's supervisor died before `session stop`; its processes were stopped"
                            + (f" (left: {[p.pid for p in left]})" if left else ""))
    _print_end(s, st)
    raise typer.Exit(int(st.get("exit", EXIT_CRASHED)))


def _print_end(s: SessionState, st: dict) -> None:
    verdict = st.get("verdict") or "crashed"
    style = {"valid": "green", "invalid": "red"}.get(verdict, "yellow")
    why = f" ({st['error']})" if st.get("error") else ""
    console.print(f"session {s.sid}: [{style} bold]{verdict.upper()}[/]{why}")
    run_dir = st.get("run_dir")
    if run_dir:
        res = RunFiles(run_dir).results
        if res.exists():
            r = json.loads(res.read_text())
            bad = {k: v for k, v in (r.get("counts") or {}).items() if v}
            console.print(f"  anomalies: {bad or 'none'}")
        if (Path(run_dir) / "schedule.json").exists():
            console.print(f"  replay its faults: onceproof run --schedule {Path(run_dir) / 'schedule.json'} ...")
        console.print(f"  report: {st.get('report') or RunFiles(run_dir).report}")


# ------------------------------------------------------------------------------ nemesis, heal

def _send(s: SessionState, cmd: str, args: dict, timeout_s: float) -> dict:
    spool = Spool(s.spool_dir)
    try:
        return spool.wait(spool.send(cmd, args), timeout_s, alive=s.supervisor_alive)
    except SpoolTimeout as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(EXIT_CRASHED) from None


def _wait_info(run_dir: Path, spec: str, after_index: int, timeout_s: float) -> dict | None:
    """The manual fault's completion op in ``nemesis.jsonl`` (its outcome and evidence), or ``None``."""
    deadline = time.monotonic() + timeout_s
    p = RunFiles(run_dir).nemesis
    while time.monotonic() < deadline:
        if p.exists():
            for line in p.read_text().splitlines():
                try:
                    op = json.loads(line)
                except ValueError:
                    continue
                if op.get("type") == "info" and op.get("f") == spec and op.get("index", -1) > after_index:
                    return op
        time.sleep(0.3)
    return None


def nemesis(fault: str = typer.Argument(..., help="FAULT or FAULT:TARGET (onceproof faults lists them)"),
            for_: str = typer.Option(None, "--for", help="how long it stays in effect (10s, 2m); default: until "
                                                         "`onceproof heal`"),
            wait: bool = typer.Option(True, help="with --for: wait for the fault's end and print its evidence"),
            results: Path = typer.Option(DEFAULT_ROOT, help=_RESULTS_HELP),
            session: str = typer.Option(None, help=_SESSION_HELP)) -> None:
    """Inject a fault into the running session, recorded as a manual op in its nemesis.jsonl.

    Exit code: 0 injected, 254 refused (an unknown fault, one the backend or the pipeline cannot take, the
    same fault still in effect; the reason is printed).
    """
    on_crash("nemesis", None)
    try:
        for_s = parse_duration(for_) if for_ else None
    except ValueError as e:
        raise usage(str(e), "--for") from None
    s = _session(results, session)
    reply = _send(s, "nemesis", {"f": fault, "for_s": for_s}, 60.0)
    if not reply.get("ok"):
        raise usage(reply.get("message", "refused"), "FAULT")
    spec = reply["f"]
    console.print(f"injected {spec} at {reply['at_s']}s" + (f" for {for_s:g}s" if for_s else " until `onceproof heal`"))
    if for_s and wait:
        op = _wait_info(Path(s.read()["run_dir"]), spec, reply["index"], for_s + 300)
        if op is None:
            console.print(f"[yellow]{spec} has not ended yet; `onceproof session status` shows it[/]")
            return
        style = {"effective": "red", "not-effective": "yellow"}.get(op["outcome"], "dim")
        console.print(f"[{style}]{spec} → {op['outcome']}[/] {op.get('target', '')} {brief(op.get('evidence') or {})}")


def heal(fault: str = typer.Argument(None, help="the fault to heal (default: every fault in effect)"),
         results: Path = typer.Option(DEFAULT_ROOT, help=_RESULTS_HELP),
         session: str = typer.Option(None, help=_SESSION_HELP)) -> None:
    """End a manual fault (or all of them): its hold ends, what it stopped comes back, its heal runs."""
    on_crash("heal", None)
    s = _session(results, session)
    reply = _send(s, "heal", {"f": fault}, 300.0)
    console.print(reply.get("message", ""))
    if not reply.get("ok"):
        raise typer.Exit(EXIT_CRASHED)


def watch(results: Path = typer.Option(DEFAULT_ROOT, help=_RESULTS_HELP),
          session: str = typer.Option(None, help=_SESSION_HELP),
          refresh: float = typer.Option(0.5, min=0.1, max=10.0, help="seconds between redraws")) -> None:
    """A live view of the running session: rates, lag, LSO vs HW per partition, the last micro-batch,
    the driver, executors and brokers, the faults in effect and the anomalies seen so far.

    Keys: ↑↓ pick a fault, i inject it (until healed), t inject it for 10 s, h heal it, a heal all,
    q or Ctrl-C leave the view (the session keeps running).
    """
    on_crash("watch", None)
    s = _session(results, session)
    from onceproof.harness.session.view import WatchApp  # textual is loaded for the view only

    WatchApp(s, refresh).run()


session_app.command("start")(start)
