"""The recover phase: after faults are healed, wait (bounded) until the pipeline has consumed all input
and no output transaction is left open.

Done when both hold:

1. the checkpoint's latest committed batch (``commits/N``) has source offsets ≥ the input topic's end
   offsets on every partition (the query consumed everything that was written);
2. every output partition's last stable offset equals its high watermark (no open transaction pins
   the LSO; Kafka Streams' ``verifyAllTransactionFinished`` checks the same).

If the deadline passes first, the reasons are returned and the verdict can be at best ``unknown``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from onceproof.clients import topics
from onceproof.store import checkpoint


@dataclass
class RecoveryStatus:
    """``finished`` plus, when not, why; offsets are per partition (records); ``seconds`` waited."""

    finished: bool
    reasons: list[str] = field(default_factory=list)
    input_end: dict[int, int] = field(default_factory=dict)
    consumed: dict[int, int] = field(default_factory=dict)
    output_lso: dict[int, int] = field(default_factory=dict)
    output_hw: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0


def status(bootstrap: str, input_topic: str, output_topic: str, ckpt: Path | None) -> RecoveryStatus:
    """One look at how far the pipeline is. ``ckpt=None`` skips the consumption test (foreign pipelines)."""
    reasons = []
    inp = topics.end_offsets(bootstrap, input_topic, committed=True)
    consumed: dict[int, int] = {}
    if ckpt is not None:
        try:
            consumed = checkpoint.committed_offsets(ckpt).get(input_topic, {})
        except (OSError, ValueError) as e:
            reasons.append(f"checkpoint unreadable: {e}")
        behind = {p: e - consumed.get(p, 0) for p, e in inp.items() if consumed.get(p, 0) < e}
        if behind:
            reasons.append(f"pipeline behind input by {sum(behind.values())} records on partitions "
                           f"{sorted(behind)}")
    lso = topics.end_offsets(bootstrap, output_topic, committed=True)
    hw = topics.end_offsets(bootstrap, output_topic, committed=False)
    stuck = [p for p in hw if lso.get(p, -1) != hw[p]]
    if stuck:
        reasons.append(f"output LSO < high watermark (open transaction) on partitions {stuck}")
    return RecoveryStatus(not reasons, reasons, inp, consumed, lso, hw)


def wait(bootstrap: str, input_topic: str, output_topic: str, ckpt: Path | None, timeout_s: float,
         progress: Callable[[RecoveryStatus], None] | None = None) -> RecoveryStatus:
    """Poll :func:`status` every ``POLL_S`` seconds until finished or ``timeout_s`` seconds passed."""
    t0 = time.monotonic()
    st = RecoveryStatus(False, ["not checked"])
    last_report = 0.0
    while True:
        try:
            st = status(bootstrap, input_topic, output_topic, ckpt)
        except Exception as e:  # noqa: BLE001 - brokers may still be electing leaders; keep waiting
            st = RecoveryStatus(False, [f"cluster not answering: {type(e).__name__}: {e}"])
        st.seconds = round(time.monotonic() - t0, 1)
        if st.finished or st.seconds >= timeout_s:
            return st
        if progress and time.monotonic() - last_report >= 5:
            progress(st)
            last_report = time.monotonic()
        time.sleep(POLL_S)


POLL_S = 0.5
"""Seconds between two looks of :func:`wait` (each look is three offset lists and a checkpoint read)."""

NO_CRITERION = ("not known whether the pipeline has consumed all its input, so lost records cannot be told "
                "from records not processed yet: pass --group GROUP (the pipeline's consumer group) or "
                "--settle SECONDS")


def group_offsets(bootstrap: str, group: str, topic: str, parts: list[int]) -> dict[int, int]:
    """Committed offsets of consumer group ``group`` on ``topic`` (partition → offset, records); partitions
    without a committed offset are absent.

    Raises: ``KafkaException`` when the cluster does not answer.
    """

    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])]
    # short per-call bounds: on a young cluster the group coordinator may still be loading
    # (COORDINATOR_LOAD_IN_PROGRESS) and the caller's loop, not one long call, should do the waiting
    a = topics.admin(bootstrap)  # keep a reference: a collected AdminClient never resolves its futures
    res = a.list_consumer_group_offsets(req, require_stable=True, request_timeout=5)
    got = res[group].result(timeout=8)
    return {tp.partition: tp.offset for tp in got.topic_partitions if tp.error is None and tp.offset >= 0}


def caught_up(bootstrap: str, input_topic: str, output_topic: str, *, group: str = "", settle_s: float = 0.0,
              timeout_s: float = 60.0, progress: Callable[[RecoveryStatus], None] | None = None,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
              ) -> RecoveryStatus:
    """For a pipeline that is not ours (no checkpoint): poll every second, up to ``timeout_s`` seconds,
    until it has consumed all its input and no output transaction is open.

    "Consumed all input" is shown by ``group`` (its committed offsets on ``input_topic`` ≥ the input's
    end offsets) and/or by ``settle_s`` (the input's end offsets and the output's high watermarks and
    last stable offsets unchanged for ``settle_s`` seconds); when both are given both must hold. With
    neither, the wait ends as soon as no output transaction is open and the status is not finished,
    with :data:`NO_CRITERION` as the reason.

    Returns: the last status; ``consumed`` holds the group's offsets when ``group`` is given.
    """
    t0 = clock()
    last_snap, stable_since = None, t0
    last_report = t0
    while True:
        try:
            st = status(bootstrap, input_topic, output_topic, None)
            reasons = list(st.reasons)
            if group:
                st.consumed = group_offsets(bootstrap, group, input_topic, sorted(st.input_end))
                behind = {p: e - st.consumed.get(p, 0) for p, e in st.input_end.items()
                          if st.consumed.get(p, 0) < e}
                if not st.consumed and any(st.input_end.values()):
                    reasons.append(f"consumer group {group!r} has no committed offsets on {input_topic} "
                                   "(check --group)")
                elif behind:
                    reasons.append(f"consumer group {group!r} is behind the input by {sum(behind.values())} "
                                   f"records on partitions {sorted(behind)}")
            now = clock()
            if settle_s:
                snap = (st.input_end, st.output_hw, st.output_lso)
                if snap != last_snap:
                    last_snap, stable_since = snap, now
                if now - stable_since < settle_s:
                    reasons.append(f"input end and output offsets not yet unchanged for {settle_s:g}s "
                                   f"(--settle; unchanged for {now - stable_since:.0f}s)")
            if not group and not settle_s:
                reasons.append(NO_CRITERION)
        except Exception as e:  # noqa: BLE001 - brokers may still be electing leaders; keep waiting
            st, reasons, now = RecoveryStatus(False), [f"cluster not answering: {type(e).__name__}: {e}"], clock()
        st.reasons, st.finished = reasons, not reasons
        st.seconds = round(now - t0, 1)
        if st.finished or st.seconds >= timeout_s or reasons == [NO_CRITERION]:
            return st
        if progress and now - last_report >= 5:
            progress(st)
            last_report = now
        sleep(1.0)


_FAILURES = (re.compile(r"KAFKA_DATA_LOSS|Some data may have been lost|offset was changed from"),
             re.compile(r"^\S*(IncompleteBatch|SinkError|Exception|Error): "),
             re.compile(r"StreamingQueryException"))
"""What names a query's failure in a driver log, most telling first: Spark's Kafka data-loss errors, then a
raised exception's own line (``module.Class: message``), then Spark's wrapper."""


def query_failure(log_dir: Path) -> str | None:
    """The error that stopped the newest failed driver's streaming query, quoted from its log
    (``<log_dir>/driver-<n>.log``, the supervisor's; the newest log that shows one, as a restarted driver
    may still be starting): the first line naming a Kafka source's data loss, else the first raised
    exception's own line (``module.Class: message``), else Spark's ``StreamingQueryException``, cut to 400
    characters, with the log's name; ``None`` when no driver's log shows one."""
    logs = sorted(Path(log_dir).glob("driver-*.log"), key=lambda f: int(re.sub(r"\D", "", f.stem) or 0))
    for log in reversed(logs):  # the newest driver that failed (the newest may still be starting)
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for pattern in _FAILURES:
            for line in lines:
                if pattern.search(line):
                    return f"{line.strip()[:400]} ({log.name})"
    return None
