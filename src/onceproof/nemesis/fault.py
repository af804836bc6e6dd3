"""What every fault is: a name, an ``invoke`` that injects it and returns evidence, and a ``heal``.

A fault never raises for an ordinary miss (no target, window not reached): it returns an outcome that
says so, and the op is recorded as not taken. Outcomes:

* ``effective`` – the fault happened, and ``evidence`` shows it (a pid gone, a log entry absent, ...);
* ``not-effective`` – it was tried and did not take effect (evidence says why); not counted;
* ``skipped`` – there was no target at that moment (e.g. the driver was restarting).

Effective is not enough for a ``valid`` verdict: a fault must also be *exercised*, i.e. hit the
pipeline where it can hurt (``Outcome.exercised``): a killed executor held a running sink task, a
killed leader's partition moved, a killed coordinator's transactions moved. See ``nemesis/coverage.py``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from onceproof.backends.base import Cluster, FaultNetwork, SparkApp
from onceproof.pipeline import hooks
from onceproof.sinks.base import CommittedEnd
from onceproof.store.readers import read_sink

EFFECTIVE, NOT_EFFECTIVE, SKIPPED = "effective", "not-effective", "skipped"
log = logging.getLogger("onceproof.nemesis")


@dataclass
class Outcome:
    """Result of one fault invocation. ``target`` names what was hit; ``evidence`` is JSON-able."""

    outcome: str
    target: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    # Did the fault hit the pipeline where it hurts (a running sink task, a partition in use, ...)?
    # ``None`` = the fault has no stronger test than taking effect: exercised == effective.
    exercised: bool | None = None

    @property
    def was_exercised(self) -> bool:
        return self.outcome == EFFECTIVE and (self.exercised is None or bool(self.exercised))


@dataclass
class NemesisContext:
    """What a fault may use: the backend's services (``backends/base.py``: the supervised pipeline, the
    cluster, the fault network when the cluster runs behind one) and the run's control dir (the pipeline's
    hooks, ``pipeline/hooks.py``) and checkpoint. Faults reach the backend only through these protocols."""

    spark: SparkApp | None
    control: Path
    checkpoint: Path
    cluster: Cluster | None = None
    output_topic: str = "output"
    input_topic: str = "input"
    sink_ids: list[str] = field(default_factory=list)  # the sink's transactional.ids
    hold_s: float = 6.0  # how long a start/stop fault stays in effect, seconds
    # the sink's capabilities (sinks/base.py); None: unknown, a fault tries its hooks anyway
    sink_capabilities: frozenset[str] | None = None
    network: FaultNetwork | None = None  # None: the cluster is not behind a fault network
    # how kill-driver-in-commit-window finds the window: "hook" (the bundled pipeline's, pipeline/hooks.py)
    # or "watch" (a --pipeline-cmd pipeline: the checkpoint and the output's LSO, nemesis/commit_window.py)
    commit_window: str = "hook"
    file_sink: Path | None = None  # the file sink's output directory (--sink file), else None
    # builds the output's committed end (onceproof.sinks.base.CommittedEnd) for the hook-free commit-window watch
    committed_end: Callable[[], CommittedEnd] | None = None
    # the run's newest output LSO samples, {partition: (t_ms, lso, hw)} (clients/lso_sampler.LsoSampler.latest)
    lso: Callable[[], dict[int, tuple[int, int, int]]] | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # set when the run wants faults to end
    # set when an interrupted run tears down: heal only what teardown will not undo (no broker restarts)
    teardown: threading.Event = field(default_factory=threading.Event)


class Fault(Protocol):
    """Jepsen's Nemesis protocol, one fault per object."""

    name: str

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        """Inject the fault once; return its outcome with evidence."""

    def heal(self, ctx: NemesisContext) -> None:
        """Undo anything still in effect; must be safe to call at any time, repeatedly."""


def perform(fault: Fault, ctx: NemesisContext, spec: str, rng_key: str, *, cut_short: str | None = None,
            **fields: Any) -> dict:
    """Invoke ``fault`` once (its RNG seeded by ``rng_key``) and return its completion op, Jepsen's
    nemesis ``info``: ``{"process": "nemesis", "type": "info", "f": spec, "outcome", "target",
    "exercised", "evidence", **fields}``, not yet in a history. A fault that raises is recorded (and
    logged), never raised: outcome ``error``, ``evidence.error``. ``cut_short``: when ``ctx.stop`` was set
    and the fault did not take effect, its outcome is ``skipped`` with this reason, not a fault that
    failed."""
    try:
        out = fault.invoke(ctx, random.Random(rng_key))
        outcome = out.outcome
        if cut_short and ctx.stop.is_set() and outcome != EFFECTIVE:
            outcome = SKIPPED
            out.evidence.setdefault("reason", cut_short)
        return {"process": "nemesis", "type": "info", "f": spec, **fields, "outcome": outcome,
                "target": out.target, "exercised": out.was_exercised and outcome == EFFECTIVE,
                "evidence": out.evidence}
    except Exception as e:  # noqa: BLE001 - a nemesis bug must not kill the run; record it
        log.exception("fault %s crashed", spec)
        return {"process": "nemesis", "type": "info", "f": spec, **fields, "outcome": "error",
                "target": "", "exercised": False, "evidence": {"error": repr(e)}}


def sink_events(run_dir: Path, since: float) -> list[dict]:
    """Events of the run's ``sink.jsonl`` (``onceproof.store.readers.read_sink``) with ``time`` ≥ ``since``
    (epoch s); torn or partial lines are skipped, a missing file is no events."""

    # polled while the tasks append: a line caught mid-write is expected, not worth a warning
    return [e for e in read_sink(run_dir, problems=[]) if e.get("time", 0) >= since]


def wait_sink_event(ctx: NemesisContext, since: float, match, wait_s: float) -> dict | None:
    """The first ``sink.jsonl`` event since ``since`` (epoch s) for which ``match(event)`` is true, polled
    every 0.2 s for up to ``wait_s`` seconds; ``None`` when none came or the run is stopping."""
    deadline = time.monotonic() + wait_s
    while True:
        e = next((e for e in sink_events(ctx.control.parent, since) if match(e)), None)
        if e is not None or time.monotonic() >= deadline or ctx.stop.wait(0.2):
            return e


def park_task(ctx: NemesisContext, partition: int, ms: int, wait_s: float) -> dict | None:
    """Park the next sink task of sink partition ``partition`` in the pre-commit hook for up to ``ms``
    ms (``<control>/precommit-hold-ms`` = ``{"ms", "partition"}``, ``onceproof.pipeline.hooks.precommit_delay``)
    and wait up to ``wait_s`` seconds for it to claim the hold. Returns the task's ``hold`` event from
    ``sink.jsonl`` (``batch``, ``partition``, ``attempt``, ``incarnation``, ``pid``, ``time``, ...), or
    ``None`` with the hold withdrawn when no task came (or the run is stopping)."""


    t0 = time.time()
    hooks.write_control(ctx.control, hooks.PRECOMMIT_HOLD, {"ms": ms, "partition": partition})
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not ctx.stop.is_set():
        held = next((e for e in sink_events(ctx.control.parent, t0)
                     if e["event"] == "hold" and e.get("partition") == partition), None)
        if held is not None:
            return held
        ctx.stop.wait(0.1)
    (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
    return None


def hold(ctx: NemesisContext, seconds: float) -> float:
    """Sleep ``seconds`` unless the run is stopping; returns the seconds actually held."""

    t = time.monotonic()
    ctx.stop.wait(seconds)
    return round(time.monotonic() - t, 2)
