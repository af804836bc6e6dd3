"""``delete-input-records``: cut the input's log start past records the pipeline has not read yet, with the
Admin API's ``DeleteRecords`` (KIP-107): what retention does to a job whose lag outgrew it, or an operator
who "cleans up" a topic.

One turn picks an input partition (seeded), reads how far the pipeline's query has read it (the end
offsets of the newest batch in the commit log, ``commits/N``) and planned it (the newest offset-log entry,
``offsets/N``: Spark's own plan) and its last stable offset, and deletes every record below the LSO: the
range ``[read, lso)`` is gone before the query committed a read of it. A batch planned but not committed
may still be reading, so its range counts as unread: the records it had not read yet are lost with the
rest. A
query with ``failOnDataLoss=false`` skips it silently (Spark's Structured Streaming + Kafka Integration
Guide: "whether to fail the query when it's possible that data is lost"), which the checker reports as
``lost-deleted``; one with ``failOnDataLoss=true`` stops with Spark's error, which the liveness check and
the driver's log show.

Evidence: the partition, the log start before and after, the read and planned offsets (and their batches),
the deleted unread range
and how many offsets it spans, and how the query went on: ``skipped`` (a later ``offsets/N`` entry plans
the partition past the cut) or ``query-failed`` (the driver's log names the loss). Effective when the
log start moved; exercised when the deleted range held offsets the query had not read yet. Nothing to
heal: deleted records cannot come back.
"""

from __future__ import annotations

import random
import time

from confluent_kafka import TopicPartition

from onceproof.clients import topics
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.store import checkpoint

FOLLOW_S = 30.0
"""How long the turn watches the query go on past the cut, s."""


def deleted_ranges(ops: list[dict]) -> list[tuple[int, int, int]]:
    """``[(partition, from, to)]``: the input offsets the effective ``delete-input-records`` turns of a
    nemesis history (``nemesis.jsonl`` completions as dicts) deleted (``to`` exclusive): from the log start
    before the turn to the one after, read by the query or not (a later read of the input has none of
    them; the unread part is the evidence's ``deleted_unread``)."""
    out = []
    for op in ops:
        ev = op.get("evidence") or {}
        if op.get("type") == "info" and str(op.get("f", "")).startswith(DeleteInputRecords.name) and \
                op.get("outcome") == EFFECTIVE and ev.get("log_start_after") is not None:
            lo, hi = int(ev.get("log_start_before") or 0), int(ev["log_start_after"])
            if hi > lo:
                out.append((int(ev["partition"]), lo, hi))
    return out


class DeleteInputRecords:
    """Delete the records of one input partition below its last stable offset, past what the query has read
    (the Admin API's DeleteRecords, KIP-107), as retention does to a job whose lag outgrew it. Evidence and
    outcomes: the module docstring."""

    name = "delete-input-records"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: the request, then a few micro-batches planning past it."""
        return 15.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        bootstrap, topic = ctx.cluster.bootstrap, ctx.input_topic
        last = checkpoint.latest_offset_batch(ctx.checkpoint)
        if last is None:
            return Outcome(SKIPPED, topic, {"reason": "the query has planned no batch yet"})
        try:
            planned = checkpoint.source_offsets(ctx.checkpoint, last).get(topic, {})
        except (OSError, ValueError):
            return Outcome(SKIPPED, topic, {"reason": f"offsets/{last} is being written"})
        parts = sorted(planned)
        if not parts:
            return Outcome(SKIPPED, topic, {"reason": f"offsets/{last} names no partition of {topic}"})
        p = parts[rng.randrange(len(parts))]
        ev: dict = {"partition": p, "planned_batch": last, "planned": planned[p]}
        done = checkpoint.latest_commit(ctx.checkpoint)
        try:
            read = checkpoint.source_offsets(ctx.checkpoint, done).get(topic, {}).get(p) if done is not None \
                else None
        except (OSError, ValueError):
            read = None
        ev["committed_batch"], ev["read"] = done, read
        try:
            lso = topics.end_offsets(bootstrap, topic, committed=True)[p]
            ev["log_start_before"] = topics.start_offsets(bootstrap, topic)[p]
            ev["lso"] = lso
            cut = topics.delete_records(bootstrap, [TopicPartition(topic, p, lso)])[p]
        except Exception as e:  # noqa: BLE001 - refused, no leader: recorded
            ev["error"] = str(e)[:300]
            return Outcome(NOT_EFFECTIVE, f"{topic}-{p}", ev)
        ev["log_start_after"] = cut
        start = ev["log_start_before"] if read is None else max(read, ev["log_start_before"])
        ev["deleted_unread"] = [start, cut] if cut > start else None
        ev["deleted_unread_offsets"] = max(0, cut - start)
        ev["query"] = self._follow(ctx, topic, p, cut, last)
        moved = cut > ev["log_start_before"]
        return Outcome(EFFECTIVE if moved else NOT_EFFECTIVE, f"{topic}-{p}", ev,
                       exercised=moved and bool(ev["deleted_unread"]))

    @staticmethod
    def _follow(ctx: NemesisContext, topic: str, p: int, cut: int, after: int) -> dict:
        """How the query went on past the cut within :data:`FOLLOW_S`: ``{"went_on": "skipped", "batch"}``
        when a later offset-log entry plans partition ``p`` at or past ``cut``; ``{"went_on": None}`` when
        none did (a query that failed on the loss plans nothing more)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < FOLLOW_S and not ctx.stop.is_set():
            last = checkpoint.latest_offset_batch(ctx.checkpoint)
            if last is not None and last > after:
                try:
                    at = checkpoint.source_offsets(ctx.checkpoint, last).get(topic, {}).get(p)
                except (OSError, ValueError):
                    at = None
                if at is not None and at >= cut:
                    return {"went_on": "skipped", "batch": last, "after_s": round(time.monotonic() - t0, 1)}
            ctx.stop.wait(1.0)
        return {"went_on": None, "watched_s": FOLLOW_S}

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing: deleted records cannot come back."""
