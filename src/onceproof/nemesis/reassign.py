"""``reassign-partitions[:output|input]``: an operator's partition reassignment in the middle of the run,
with Kafka's own tool (:mod:`onceproof.clients.reassign`), in two phases over every partition of the
target topic:

1. *shrink*: each partition's current leader is taken out of its replica set (RF 3 → 2), so every leader
   of the topic moves and the removed replica's log is deleted;
2. *restore*: the original replica list goes back, so the removed broker rebuilds each partition from
   offset 0 by fetching (for the output topic: its transaction markers and producer state too) and rejoins
   the ISR.

Each phase waits until the metadata shows the planned replicas all in sync (:data:`WAIT_S`). Evidence:
the plans, the tool's answer, each phase's duration, the leaders before and after the shrink, the final
assignment. Effective when both phases completed and the topic is back to its original assignment;
exercised when a leader of the topic moved. ``heal`` restores the original assignment (``--additional``,
over a phase still in progress) unless the cluster is being torn down. Skipped while a broker is down (a
replica set naming it would never complete).
"""

from __future__ import annotations

import random

from onceproof.clients import reassign, topics
from onceproof.nemesis.broker import _live
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome

WAIT_S = 90.0
"""How long one phase may take before the fault gives up (s): the restore refetches a partition's whole
log (a few MB in a default run)."""


def shrink_plan(view: dict[int, dict], topic: str) -> tuple[reassign.Plan, reassign.Plan]:
    """``(shrink, original)`` plans for ``topic``'s partitions in ``view`` (``{partition: {"leader",
    "replicas", "isr"}}``): the shrink drops each partition's leader from its replicas; partitions without
    a leader or with one replica are left out of both."""
    shrink, original = {}, {}
    for p, m in sorted(view.items()):
        if m["leader"] < 0 or len(m["replicas"]) < 2:
            continue
        shrink[(topic, p)] = [r for r in m["replicas"] if r != m["leader"]]
        original[(topic, p)] = list(m["replicas"])
    return shrink, original


class ReassignPartitions:
    """Move every leader's replica of the target topic away, then back (two reassignments)."""

    name = "reassign-partitions"
    target_choices = ("output", "input")

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: two runs of the tool (a JVM each, about 3 s) and the two
        phases completing (a few s each on 2 cores)."""
        return 30.0

    def __init__(self, target: str | None = None):
        self.target = target
        self._restore: reassign.Plan | None = None

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        which = self.target or rng.choice(self.target_choices)
        topic = ctx.output_topic if which == "output" else ctx.input_topic
        live = _live(ctx)
        if len(live) < len(ctx.cluster.nodes):
            return Outcome(SKIPPED, which, {"reason": "a broker is down", "live": live})
        bootstrap = ctx.cluster.bootstrap
        view = topics.replica_view(bootstrap).get(topic, {})
        shrink, original = shrink_plan(view, topic)
        if not shrink:
            return Outcome(SKIPPED, which, {"reason": f"no partition of {topic} has a leader and 2+ replicas"})
        ev: dict = {"topic": topic, "partitions": len(shrink),
                    "original": {p: r for (_, p), r in original.items()},
                    "shrink": {p: r for (_, p), r in shrink.items()},
                    "leaders_before": {p: m["leader"] for p, m in view.items()}}
        self._restore = original
        try:
            ev["tool_shrink"] = reassign.execute(bootstrap, shrink, ctx.control / "reassign-shrink.json")[-300:]
            ev["shrink_s"], ev["shrink_pending"] = reassign.wait_done(bootstrap, shrink, WAIT_S, ctx.teardown)
            ev["leaders_after_shrink"] = _leaders(bootstrap, topic)
            # the restore runs even after a shrink that did not complete: --additional replaces it
            ev["tool_restore"] = reassign.execute(bootstrap, original, ctx.control / "reassign-restore.json",
                                                  additional=ev["shrink_s"] is None)[-300:]
            ev["restore_s"], ev["restore_pending"] = reassign.wait_done(bootstrap, original, WAIT_S, ctx.teardown)
        except reassign.ReassignError as e:
            ev["error"] = str(e)
            return Outcome(NOT_EFFECTIVE, which, ev)
        if ev["restore_s"] is not None:
            self._restore = None
        moved = sorted(p for p, leader in ev["leaders_before"].items()
                       if ev["leaders_after_shrink"].get(p) not in (None, leader))
        ev["leaders_moved"] = moved
        ok = ev["shrink_s"] is not None and ev["restore_s"] is not None
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{which}: {len(shrink)} partitions of {topic}", ev,
                       exercised=bool(moved))

    def heal(self, ctx: NemesisContext) -> None:
        """Put back the original assignment of an interrupted turn (never while the cluster is torn down)."""
        plan, self._restore = self._restore, None
        if plan is None or ctx.teardown.is_set() or ctx.cluster is None:
            return
        try:
            reassign.execute(ctx.cluster.bootstrap, plan, ctx.control / "reassign-heal.json", additional=True)
        except Exception:  # noqa: BLE001 - heal must not raise; the next run starts on a new cluster anyway
            pass


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: leader id}`` of ``topic`` (``{}`` when the metadata could not be read)."""
    try:
        return {p: m["leader"] for p, m in topics.replica_view(bootstrap).get(topic, {}).items()}
    except Exception:  # noqa: BLE001
        return {}
