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

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness import checkpoint, topics


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
    """Poll :func:`status` every second until finished or ``timeout_s`` seconds passed."""
    t0 = time.monotonic()
    st = RecoveryStatus(False, ["not checked"])
    last_report = 0.0
    while True:
        try:
            st = status(bootstrap, input_topic, output_topic, ckpt)
        except Exception as e:  # noqa: BLE001 - brokers may still be electing leaders; keep waiting
            st = RecoveryStatus(False, [f"cluster not answering: {e}"])
        st.seconds = round(time.monotonic() - t0, 1)
        if st.finished or st.seconds >= timeout_s:
            return st
        if progress and time.monotonic() - last_report >= 5:
            progress(st)
            last_report = time.monotonic()
        time.sleep(1.0)
