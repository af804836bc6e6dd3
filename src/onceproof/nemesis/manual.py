"""Faults injected by hand during a session (``onceproof nemesis FAULT[:TARGET] [--for 30s]``), recorded in
``nemesis.jsonl`` exactly as :class:`~onceproof.nemesis.runner.NemesisRunner` records a planned fault, plus
``"manual": true``, so coverage, the report's fault bands and the checkers read them unchanged.

Each fault runs in its own thread with a copy of the run's :class:`~onceproof.nemesis.fault.NemesisContext`
whose ``hold_s`` is the ``--for`` (or :data:`UNTIL_HEALED`) and whose ``stop`` event is its own: every
fault's hold waits on ``ctx.stop`` (``nemesis/fault.py`` ``hold``), so :meth:`ManualNemesis.heal` ends the
hold early by setting that event, then calls the fault's ``heal``. At most one fault of a name is active at
a time (a second ``kill-broker`` while one holds is refused: the first one's heal would undo both).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from onceproof.nemesis.fault import Fault, NemesisContext, perform
from onceproof.store.history import HistoryWriter

UNTIL_HEALED = 24 * 3600.0
"""The hold of a fault given without ``--for``: until ``onceproof heal`` or the end of the session (s)."""
JOIN_S = 120.0
"""How long a heal waits for a fault's own end (its restart, its evidence) before healing anyway (s)."""


class ManualFaultError(ValueError):
    """A fault that cannot be injected now (the same fault is active, the session is stopping)."""


@dataclass
class Active:
    """One fault in effect: its spec, the context it holds on, its thread, when it began
    (``time.monotonic()``), its ``--for`` (s; ``None``: until healed) and its invoke op."""

    spec: str
    ctx: NemesisContext
    fault: Fault
    thread: threading.Thread
    began: float
    for_s: float | None
    invoke: dict = field(default_factory=dict)


class ManualNemesis:
    """The session's faults. ``build(spec)`` makes the fault object (``catalog.build``); ``elapsed()`` is
    the session's clock for ``at_s`` (s since the pipeline's first committed batch, as a schedule's);
    ``on_op`` sees each completed op. Offers the nemesis runner's surface that the runner uses
    (:attr:`ops`, :attr:`in_flight`, :meth:`close`, :meth:`stop_and_heal`)."""

    def __init__(self, ctx: NemesisContext, history: HistoryWriter, build: Callable[[str], Fault],
                 elapsed: Callable[[], float], on_op: Callable[[dict], None] | None = None):
        self.ctx, self.history, self.build, self.elapsed = ctx, history, build, elapsed
        self.on_op = on_op or (lambda op: None)
        self.ops: list[dict] = []  # completed info ops, in order
        self.invokes: list[dict] = []  # every invoke op, in order (the session's schedule)
        self._active: dict[str, Active] = {}
        self._faults: dict[str, Fault] = {}  # every fault object made, by spec: the final heal uses them
        self._held: dict[str, float] = {}  # rng key → seconds a fault without --for was in effect until healed
        self._lock = threading.Lock()
        self._closed = False

    @property
    def in_flight(self) -> str | None:
        """A fault still in effect (the oldest), or ``None``."""
        with self._lock:
            return next(iter(self._active), None)

    def active(self) -> list[dict]:
        """The faults in effect: ``[{"f", "age_s", "for_s"}]``, oldest first."""
        now = time.monotonic()
        with self._lock:
            return [{"f": a.spec, "age_s": round(now - a.began, 1), "for_s": a.for_s} for a in self._active.values()]

    def inject(self, spec: str, for_s: float | None, command: str = "") -> dict:
        """Start ``spec`` for ``for_s`` seconds (``None``: until healed); returns its invoke op.

        Raises: :class:`ManualFaultError` when the session is stopping or a fault of the same name is in
        effect; ``ValueError`` from ``build`` for an unknown fault or target."""
        name = spec.partition(":")[0]
        fault = self._faults.get(spec) or self.build(spec)
        with self._lock:
            if self._closed:
                raise ManualFaultError("the session is stopping: no new fault")
            clash = [s for s in self._active if s.partition(":")[0] == name]
            if clash:
                raise ManualFaultError(f"{clash[0]} is still in effect: `onceproof heal {clash[0]}` first")
            self._faults[spec] = fault
            i = len(self.invokes)
            rng_key = f"manual-{i}"
            ctx = dataclasses.replace(self.ctx, hold_s=for_s if for_s is not None else UNTIL_HEALED,
                                      stop=threading.Event())
            invoke = {"process": "nemesis", "type": "invoke", "f": spec, "manual": True, "rng": rng_key,
                      "at_s": round(self.elapsed(), 3), "for_s": for_s, "command": command}
            invoke = self.history.append(invoke)
            self.invokes.append(invoke)
            t = threading.Thread(target=self._run, args=(spec, fault, ctx, rng_key), name=f"manual-{spec}",
                                 daemon=True)
            self._active[spec] = Active(spec, ctx, fault, t, time.monotonic(), for_s, invoke)
            t.start()
        return invoke

    def _run(self, spec: str, fault: Fault, ctx: NemesisContext, rng_key: str) -> None:
        op = self.history.append(perform(fault, ctx, spec, rng_key, manual=True))
        with self._lock:
            self.ops.append(op)
            a = self._active.pop(spec, None)
        if a is not None and a.ctx.stop.is_set():  # healed by hand: make sure it is undone
            self._heal_one(a)
        self.on_op(op)

    def _heal_one(self, a: Active) -> str | None:
        try:
            a.fault.heal(a.ctx)
            self.history.append({"process": "nemesis", "type": "info", "f": "heal", "fault": a.spec, "manual": True})
            return None
        except Exception as e:  # noqa: BLE001 - keep healing the others; the error is returned
            return f"{a.spec}: {e!r}"

    def heal(self, spec: str | None = None, join_timeout_s: float = JOIN_S) -> tuple[list[str], list[str]]:
        """End ``spec`` (a name matches every target of it; ``None``: every fault in effect): its hold ends,
        its own end runs (a broker restarts, a pause resumes) within ``join_timeout_s`` s, then its heal.
        Returns (the specs healed, heal errors)."""
        with self._lock:
            picked = [a for s, a in self._active.items()
                      if spec is None or s == spec or s.partition(":")[0] == spec]
        now = time.monotonic()
        for a in picked:
            if a.for_s is None:
                self._held[a.invoke["rng"]] = round(now - a.began, 3)
            a.ctx.stop.set()
        errors = []
        for a in picked:
            a.thread.join(timeout=join_timeout_s)
            if a.thread.is_alive():
                err = self._heal_one(a)  # its own end is stuck: heal it from outside
                if err:
                    errors.append(err)
        return [a.spec for a in picked], errors

    def close(self) -> None:
        """No new fault from now on."""
        with self._lock:
            self._closed = True

    def stop_and_heal(self, join_timeout_s: float = JOIN_S) -> list[str]:
        """Close, end every fault in effect and heal every fault ever injected (idempotent heals, as the
        runner's); returns the heal errors. Never raises."""
        self.close()
        self.ctx.stop.set()
        _, errors = self.heal(None, join_timeout_s)
        for spec, fault in list(self._faults.items()):
            try:
                fault.heal(self.ctx)
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{spec}: {e!r}")
        return errors

    def schedule(self) -> dict:
        """The session's faults as a ``run --schedule`` file's content (``harness/config.py``
        ``read_schedule``): each invoke's ``at_s``, spec, RNG key, and as ``hold_s`` its ``--for``, or,
        for one held until ``heal``, how long it was held."""
        out = []
        for inv in self.invokes:
            hold_s = inv.get("for_s") if inv.get("for_s") is not None else self._held.get(inv["rng"])
            out.append({"at_s": inv["at_s"], "f": inv["f"], "rng": inv["rng"],
                        **({"hold_s": hold_s} if hold_s is not None else {})})
        return {"faults": out}
