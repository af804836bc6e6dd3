"""Executes a fault schedule in a background thread and records every op in ``nemesis.jsonl``.

Ops: ``{"type": "invoke", "f": <fault>}`` then ``{"type": "info", "f": <fault>, "outcome": ...,
"target": ..., "evidence": {...}}`` (Jepsen records nemesis completions as ``info``). The first fault
waits until the pipeline has committed its first batch, so no fault hits a pipeline still starting.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

from store.history import HistoryWriter
from nemesis.fault import Fault, NemesisContext

log = logging.getLogger("onceproof.nemesis")


class NemesisRunner:
    """Runs ``schedule`` (``[(at_s, name)]``) against ``faults`` until done or :meth:`stop`."""

    def __init__(self, faults: dict[str, Fault], schedule: list[tuple[float, str]], ctx: NemesisContext,
                 history: HistoryWriter, seed: int, on_op: Callable[[dict], None] | None = None):
        self.faults, self.schedule, self.ctx, self.history = faults, schedule, ctx, history
        self.seed = seed
        self.on_op = on_op or (lambda op: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ops: list[dict] = []
        self.started_at: float | None = None  # time.monotonic() when ready() first held: the plan's 0 s
        self._healed = False

    def start(self, ready: Callable[[], bool]) -> None:
        """Start once ``ready()`` (polled every 0.5 s) says the pipeline is up."""
        self._thread = threading.Thread(target=self._run, args=(ready,), name="nemesis", daemon=True)
        self._thread.start()

    def _run(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self._stop.wait(0.5):
                return
        t0 = self.started_at = time.monotonic()
        for i, (at_s, name) in enumerate(self.schedule):
            if self._stop.wait(max(0.0, t0 + at_s - time.monotonic())):
                return
            fault = self.faults[name]
            self.history.append({"process": "nemesis", "type": "invoke", "f": name, "planned_s": at_s})
            try:
                # one RNG per op: a fault that draws more or fewer numbers cannot shift the targets of
                # the ops after it, so a seed replays concrete targets (broker id, sink partition)
                out = fault.invoke(self.ctx, random.Random(f"targets-{self.seed}-{i}"))
                outcome = out.outcome
                if self.ctx.stop.is_set() and outcome != "effective":
                    outcome = "skipped"  # cut short by the end of the run: not a fault that failed
                    out.evidence.setdefault("reason", "interrupted by the end of the run")
                op = {"process": "nemesis", "type": "info", "f": name, "outcome": outcome,
                      "target": out.target, "exercised": out.was_exercised and outcome == "effective",
                      "evidence": out.evidence}
            except Exception as e:  # noqa: BLE001 - a nemesis bug must not kill the run; record it
                log.exception("fault %s crashed", name)
                op = {"process": "nemesis", "type": "info", "f": name, "outcome": "error",
                      "target": "", "exercised": False, "evidence": {"error": repr(e)}}
            op = self.history.append(op)
            self.ops.append(op)
            self.on_op(op)

    def stop_and_heal(self, join_timeout_s: float = 120.0) -> list[str]:
        """Stop injecting, wait for an in-flight fault (≤ ``join_timeout_s`` s), then heal every fault.

        Returns the heal errors. A second call heals again only if the first one left errors or the
        teardown flag (``ctx.teardown``) changed nothing to do; it never raises.
        """
        self._stop.set()
        self.ctx.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=join_timeout_s)
            if self._thread.is_alive():
                log.warning("a fault was still in flight after %.0fs; healing anyway", join_timeout_s)
        if self._healed:
            return []
        errors = []
        for name, f in self.faults.items():
            try:
                f.heal(self.ctx)
                self.history.append({"process": "nemesis", "type": "info", "f": "heal", "fault": name})
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{name}: {e!r}")
        self._healed = not errors
        return errors
