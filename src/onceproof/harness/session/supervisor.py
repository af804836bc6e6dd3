"""A session's supervisor: ``python -m onceproof.harness.session.supervisor --results R --id ID -- <run options>``,
started detached by ``onceproof session start`` (its own session and process group: closing the terminal
that started it sends it nothing).

It is :func:`onceproof.harness.runner.run` with :func:`drive` as the run phase: the same setup (cluster,
topics, database, supervised driver), the same services (workload, live reader, LSO sampler), the same
teardown on every exit path and the same process reaper (a SIGKILLed supervisor still loses every process
it started), then heal → recover → check → results and report when the session stops. Between, it
executes the spool's commands (:mod:`.spool`): ``nemesis`` (a manual fault, :mod:`onceproof.nemesis.manual`),
``heal``, ``status`` and ``stop``; a session with no command for ``--max-idle`` seconds stops itself.

State (:mod:`.state`): ``starting`` → ``up`` (with where everything is) → ``stopping`` → ``finished``
(verdict, exit code, report), or ``failed`` when the setup failed. On stop it writes the manual faults as
``schedule.json`` in the run directory: ``onceproof run --schedule`` repeats them on a fresh cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import psutil
from rich.console import Console

from onceproof.harness import runner, signals
from onceproof.harness.config import ConfigError
from onceproof.harness.session.live import LiveStatus
from onceproof.harness.session.spool import Command, Spool
from onceproof.harness.session.state import SessionState
from onceproof.nemesis import catalog
from onceproof.nemesis.manual import ManualFaultError, ManualNemesis
from onceproof.store import checkpoint
from onceproof.store.runfiles import RunFiles

SCHEDULE = "schedule.json"
"""The session's faults as a ``--schedule`` file, in its run directory."""
STATUS_EVERY_S = 1.0
REPORT_EVERY_S = 10.0


def _resolve_spec(r, spec: str, key: str) -> str:
    """``spec`` checked as ``--nemesis`` checks it (a known fault, one the backend and the sink can take),
    with a target drawn (seeded by ``key``) when it names none and has targets.

    Raises: ``ConfigError`` naming why and the fix."""
    r.cfg.check_fault(spec)
    name, _, target = spec.partition(":")
    choices = r.cfg.target_choices().get(name)
    if not target and choices:
        spec = f"{name}:{random.Random(key).choice(list(choices))}"
    return spec


def _handle(r, nem: ManualNemesis, c: Command) -> tuple[dict, bool]:
    """One command → (its reply, whether the session stops)."""
    if c.cmd == "nemesis":
        spec, for_s = str(c.args.get("f", "")), c.args.get("for_s")
        try:
            spec = _resolve_spec(r, spec, f"manual-{len(nem.invokes)}")
            inv = nem.inject(spec, None if for_s is None else float(for_s), command=c.name)
        except (ConfigError, ManualFaultError, ValueError) as e:
            return {"ok": False, "message": getattr(e, "message", None) or str(e)}, False
        return {"ok": True, "message": f"injected {spec}", "f": spec, "index": inv["index"],
                "at_s": inv["at_s"]}, False
    if c.cmd == "heal":
        healed, errors = nem.heal(c.args.get("f") or None)
        msg = f"healed {', '.join(healed)}" if healed else "no fault was in effect"
        return {"ok": not errors, "message": msg + (f"; heal errors: {errors}" if errors else ""),
                "healed": healed}, False
    if c.cmd == "status":
        return {"ok": True, "message": "up", **_status(r, nem)}, False
    if c.cmd == "stop":
        return {"ok": True, "message": "stopping: heal, recover, check"}, True
    return {"ok": False, "message": f"unknown command {c.cmd!r}"}, False


def _status(r, nem: ManualNemesis) -> dict:
    s = r.workload.stats
    return {"faults": nem.active(), "batch_committed": checkpoint.latest_commit(r.ckpt),
            "driver_restarts": r.spark.restarts(), "sends": {"ok": s.ok, "info": s.info, "fail": s.fail},
            "ops": len(nem.ops)}


def faults_available(cfg) -> list[str]:
    """The catalog's faults (by name; a target is drawn when injected) that this session can take."""
    out = []
    for name in catalog.FAULTS:
        try:
            cfg.check_fault(name)
        except ConfigError:
            continue
        out.append(name)
    return out


def drive(r, st: SessionState, spool: Spool, max_idle_s: float) -> None:
    """The run phase of a session (``runner.run``'s ``drive``): the services, then commands until
    ``stop`` or ``max_idle_s`` seconds without one; sets ``r.plan`` to the faults injected (coverage
    judges them as a run's planned faults) and writes :data:`SCHEDULE`."""
    cfg = r.cfg
    runner.start_services(r)
    zero: list[float] = []  # time.monotonic() at the first committed batch: the schedule's 0 s

    def elapsed() -> float:
        return time.monotonic() - zero[0] if zero else 0.0

    def build(spec: str):
        return catalog.build([spec], txn_timeout_ms=cfg.txn_timeout_ms, partitions=cfg.partitions,
                             max_offsets=cfg.max_offsets, kafka_upgrade_to=cfg.kafka_upgrade_to)[spec]

    r.nem = nem = ManualNemesis(r.ctx, r.nem_hist, build, elapsed, on_op=runner.on_op(r))
    r.td.push("nemesis stop and heal", lambda: runner._heal_faults(r, teardown=True))
    live = LiveStatus(r, nem, st.live, r.names.input)
    r.workload.start()
    st.update(state="up", run_dir=str(r.rd.path), bootstrap=r.cluster.bootstrap, master=cfg.master,
              backend=cfg.backend, up_at=time.time(), max_idle_s=max_idle_s, faults_available=faults_available(cfg))
    r.console.print(f"session up: bootstrap {r.cluster.bootstrap}, run directory {r.rd.path}")
    snapshot_errors: set[str] = set()
    last_cmd = time.monotonic()
    next_status = next_report = time.monotonic()
    reason = ""
    while not reason:
        if not zero and checkpoint.latest_commit(r.ckpt) is not None:
            zero.append(time.monotonic())
        for c in spool.pending():
            last_cmd = time.monotonic()
            reply, stop = _handle(r, nem, c)
            spool.answer(c.name, reply)
            r.console.print(f"command {c.cmd} {c.args or ''} → {reply['message']}")
            if stop:
                reason = "session stop"
                break
        if not reason and time.monotonic() - last_cmd > max_idle_s:
            reason = f"no command for {max_idle_s:.0f}s (--max-idle)"
        now = time.monotonic()
        s = _status(r, nem) if now >= min(next_status, next_report) else {}
        if now >= next_status:
            st.update(**s)
            try:
                live.tick()
            except Exception as e:  # noqa: BLE001 - the view's snapshot must never end the session
                if repr(e) not in snapshot_errors:  # once per distinct error, not once a second
                    snapshot_errors.add(repr(e))
                    r.console.print(f"[yellow]live snapshot failed (onceproof watch shows it stale): "
                                    f"{type(e).__name__}: {e}[/]")
            next_status = now + STATUS_EVERY_S
        if now >= next_report:
            r.console.print(f"batch committed={s['batch_committed']} | driver restarts={s['driver_restarts']} | "
                            f"faults active={[f['f'] for f in s['faults']]} | ops={s['ops']}")
            next_report = now + REPORT_EVERY_S
        time.sleep(0.2)
    st.update(state="stopping", stop_reason=reason)
    r.console.print(f"stopping the session: {reason}")
    r.plan = [(inv["at_s"], inv["f"]) for inv in nem.invokes]
    r.rd.write_json(SCHEDULE, nem.schedule())


def main(argv: list[str] | None = None) -> int:
    """Run the session; exit code as ``onceproof run``'s (0 valid, 1 invalid, 2 unknown, 255 crashed)."""
    ap = argparse.ArgumentParser(prog="python -m onceproof.harness.session.supervisor")
    ap.add_argument("--results", required=True, help="the results root (its .sessions/ holds the state)")
    ap.add_argument("--id", required=True, help="the session id")
    ap.add_argument("--max-idle", type=float, required=True, help="stop after this many seconds without a command")
    ap.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then onceproof run's options")
    a = ap.parse_args(argv)
    from onceproof.harness.cli.run import _configure_run_logging, parse_run_args

    st = SessionState(a.results, a.id)
    me = psutil.Process()
    st.update(state="starting", id=a.id, pid=me.pid, pid_created=me.create_time(), started=time.time())
    run_args = a.run_args[1:] if a.run_args[:1] == ["--"] else a.run_args
    try:
        cfg = parse_run_args(run_args)
        cfg.validate()
        cfg.backend_instance()
    except Exception as e:  # noqa: BLE001 - the CLI checked these already; recorded for it to print
        st.update(state="failed", error=str(e))
        return 254
    os.environ.pop("ONCEPROOF_RUN", None)
    _configure_run_logging(False)
    signals.install()  # SIGTERM/SIGINT: a crashed run, torn down as run's
    console = Console(file=sys.stdout, force_terminal=False, width=140)
    spool = Spool(st.spool_dir)
    code, run_dir = runner.run(cfg, console, drive=lambda r: drive(r, st, spool, a.max_idle))
    result = {}
    try:
        result = json.loads(RunFiles(run_dir).results.read_text())
    except (OSError, ValueError):
        pass
    state = "finished" if st.read().get("state") in ("up", "stopping") else "failed"
    st.update(state=state, exit=code, verdict=result.get("verdict"), error=result.get("error"),
              run_dir=str(run_dir), report=str(RunFiles(run_dir).report), finished=time.time())
    return code


if __name__ == "__main__":
    sys.exit(main())
