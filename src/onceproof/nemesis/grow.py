"""``add-input-partitions``: an operator grows the input topic in the middle of the run (``CreatePartitions``,
KIP-195), as one does when a pipeline falls behind.

Three parties must follow: the workload's producer starts writing to the new partitions once its
metadata refreshes (``topic.metadata.refresh.interval.ms``, 5 s in ``workloads/keyed.py``; its
partitioner then maps some keys anew), Spark's Kafka source finds them at a micro-batch's planning
(``KafkaOffsetReader`` lists the topic's partitions each trigger; a partition added while the query runs
is read from its earliest offset: Spark's Structured Streaming + Kafka integration guide), and the checker
owes each record once and order only within an input partition (``checkers/exactly_once.py``).

Evidence: the partition counts before and after, the high watermarks of the new partitions (records
written to them) and the first offset-log entry (``offsets/N`` of the checkpoint) that names them.
Effective when the topic grew; exercised when the pipeline planned a batch reading records from a new
partition (its offset there above 0) within :data:`FOLLOW_S`. Nothing to heal: a topic never shrinks.
"""

from __future__ import annotations

import random
import time

from onceproof.clients import topics
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, NemesisContext, Outcome
from onceproof.store import checkpoint

ADD = 2
"""Partitions added per turn."""
FOLLOW_S = 60.0
"""How long the turn watches the producer and the pipeline take up the new partitions (s)."""


def planned_new(offsets: dict[str, dict[int, int]], topic: str, new: list[int]) -> dict[int, int]:
    """``{new partition: end offset}`` of the partitions in ``new`` that an offset-log entry (``offsets``,
    :func:`onceproof.store.checkpoint.source_offsets`'s shape) reads records from (offset > 0)."""
    return {p: o for p, o in offsets.get(topic, {}).items() if p in new and o > 0}


class AddInputPartitions:
    """Grow the input topic by :data:`ADD` partitions and watch the workload and the pipeline follow."""

    name = "add-input-partitions"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: the request, then the producer's metadata refresh (5 s)
        and the next micro-batches (about 10 s on 2 cores)."""
        return 20.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        bootstrap, topic = ctx.cluster.bootstrap, ctx.input_topic
        before = topics.partitions(bootstrap, topic)
        total = len(before) + ADD
        new = list(range(len(before), total))
        ev: dict = {"topic": topic, "partitions_before": len(before), "partitions_after": None, "new": new}
        t0 = time.monotonic()
        try:
            topics.add_partitions(bootstrap, topic, total)
        except Exception as e:  # noqa: BLE001 - refused or no leader: recorded
            ev["error"] = str(e)[:300]
            return Outcome(NOT_EFFECTIVE, topic, ev)
        ev["partitions_after"] = len(topics.partitions(bootstrap, topic))
        ev["grown_after_s"] = round(time.monotonic() - t0, 2)
        written, planned = {}, {}
        start_batch = checkpoint.latest_offset_batch(ctx.checkpoint) or 0
        while time.monotonic() - t0 < FOLLOW_S and not ctx.stop.is_set():
            if not written:
                try:
                    hw = topics.end_offsets(bootstrap, topic, committed=False)
                    written = {p: o for p, o in hw.items() if p in new and o > 0}
                    if written:
                        ev["written_after_s"] = round(time.monotonic() - t0, 1)
                except Exception:  # noqa: BLE001 - a broker busy: ask again
                    pass
            last = checkpoint.latest_offset_batch(ctx.checkpoint)
            if last is not None and last > start_batch and not planned:
                try:
                    planned = planned_new(checkpoint.source_offsets(ctx.checkpoint, last), topic, new)
                except (OSError, ValueError):  # being written
                    pass
                if planned:
                    ev["planned_batch"], ev["planned_after_s"] = last, round(time.monotonic() - t0, 1)
            if written and planned:
                break
            ctx.stop.wait(1.0)
        ev["new_written"], ev["new_planned"] = written, planned
        ok = ev["partitions_after"] == total
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{topic}: {len(before)} → {total}", ev,
                       exercised=bool(planned))

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing: partitions cannot be removed from a topic."""
