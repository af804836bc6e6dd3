"""``delete-input-records``: cut the input's log start past records the pipeline has not read yet, with the
Admin API's ``DeleteRecords`` (KIP-107): what retention does to a job whose lag outgrew it, or an operator
who "cleans up" a topic.

One turn makes the query fall behind, then cuts:

* it freezes the query (the driver with its executors, SIGSTOP) for :data:`LAG_S` while the workload goes
  on writing. An executor's Kafka consumer keeps what its last fetch returned, so records deleted right
  after a poll can still be read; those written while nothing polls cannot;
* it picks an input partition (seeded), reads how far the query has read it (the end offsets of the newest
  batch in the commit log, ``commits/N``) and planned it (the newest offset-log entry, ``offsets/N``:
  Spark's own plan) and its last stable offset, deletes every record below the LSO, and thaws the query.

A query with ``failOnDataLoss=false`` skips what it had not fetched silently (Spark's Structured
Streaming + Kafka Integration Guide: "whether to fail the query when it's possible that data is lost"),
which the checker reports as ``lost-deleted``; one with ``failOnDataLoss=true`` stops with Spark's error,
which the liveness check and the driver's log show.

Evidence: the partition, the log start before and after, the read and planned offsets (and their
batches), the freeze (``lag``), ``deleted_unread`` ``[read, cut)`` (a batch planned but not committed may
still be reading: its range counts as unread) with how many offsets it spans, ``deleted_unfetched``
``[max(planned, LSO at the freeze), cut)`` (records no executor can have fetched), and how the query went
on: ``skipped`` (a later ``offsets/N`` entry plans the partition past the cut). Effective when the log
start moved; exercised when ``deleted_unfetched`` is not empty (on a backend that cannot freeze its
driver: when the cut passed the plan). Heal thaws a query a turn left frozen; deleted records cannot come
back.
"""

from __future__ import annotations

import random
import time

from confluent_kafka import TopicPartition

from onceproof.backends.base import DriverPause
from onceproof.clients import topics
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.store import checkpoint

LAG_S = 3.0
"""How long a turn holds the query frozen before the cut, s: records written meanwhile are unfetched."""

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
        """Expected length of one turn, seconds: the freeze, the request, then a few micro-batches planning
        past the cut."""
        return 15.0 + LAG_S

    def __init__(self) -> None:
        self._frozen: int | None = None  # the driver pid this turn froze, until it is thawed

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        if checkpoint.latest_offset_batch(ctx.checkpoint) is None:
            return Outcome(SKIPPED, ctx.input_topic, {"reason": "the query has planned no batch yet"})
        lag = self._fall_behind(ctx)
        try:
            out = self._cut(ctx, rng, lag)
        finally:
            self._thaw(ctx)
        if out.outcome == EFFECTIVE:
            out.evidence["query"] = self._follow(ctx, ctx.input_topic, out.evidence["partition"],
                                                 out.evidence["log_start_after"], out.evidence["planned_batch"])
        return out

    def _fall_behind(self, ctx: NemesisContext) -> dict:
        """Freeze the query (the driver with its executors, :class:`DriverPause`) for :data:`LAG_S` while the
        workload goes on writing, so that records pile up that no executor has fetched: a job whose lag
        outgrew retention. An executor's consumer keeps what its last fetch returned (Spark's fetched-data
        pool), so records deleted right after a poll may still be read; those written during the freeze
        cannot be. Returns ``{"frozen", "held_s", "lso_at_freeze"}`` (``frozen`` False when the backend
        cannot pause its driver: the cut is then made on a running query)."""
        spark, pid = ctx.spark, getattr(ctx.spark, "driver_pid", None)
        lag: dict = {"frozen": False, "held_s": 0.0, "lso_at_freeze": None}
        if not isinstance(spark, DriverPause) or pid is None:
            return lag
        if not spark.freeze_driver(pid):
            return lag
        self._frozen = pid
        t0 = time.monotonic()
        try:
            lag["lso_at_freeze"] = topics.end_offsets(ctx.cluster.bootstrap, ctx.input_topic, committed=True)
        except Exception:  # noqa: BLE001 - a broker fault may be under way: the cut reads again
            pass
        ctx.stop.wait(LAG_S)
        lag.update(frozen=True, held_s=round(time.monotonic() - t0, 1))
        return lag

    def _thaw(self, ctx: NemesisContext) -> None:
        pid, self._frozen = self._frozen, None
        if pid is not None and isinstance(ctx.spark, DriverPause):
            ctx.spark.thaw_driver(pid)

    @staticmethod
    def _cut(ctx: NemesisContext, rng: random.Random, lag: dict) -> Outcome:
        """Delete one seeded input partition's records below its LSO; the outcome and evidence of the module
        docstring."""
        bootstrap, topic = ctx.cluster.bootstrap, ctx.input_topic
        last = checkpoint.latest_offset_batch(ctx.checkpoint)
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
        at_freeze = (lag.get("lso_at_freeze") or {}).get(p)
        ev["lag"] = {"frozen": lag["frozen"], "held_s": lag["held_s"], "lso_at_freeze": at_freeze}
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
        # never fetched: past the plan and, when the query was frozen, written during the freeze
        never = max(planned[p], at_freeze) if lag["frozen"] and at_freeze is not None else None
        ev["deleted_unfetched"] = [never, cut] if never is not None and cut > never else None
        moved = cut > ev["log_start_before"]
        return Outcome(EFFECTIVE if moved else NOT_EFFECTIVE, f"{topic}-{p}", ev,
                       exercised=moved and bool(ev["deleted_unfetched"] if lag["frozen"] else cut > planned[p]))

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
        """Thaw the query if a turn left it frozen; deleted records cannot come back."""
        self._thaw(ctx)
