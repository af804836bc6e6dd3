"""``driver-clock-skew``: the Spark driver's own wall clock jumps forward or back by :data:`OFFSET_S` for a
while, then returns to the real time; the host's clock never changes and the executors keep the real one
(the backend's :class:`onceproof.backends.base.DriverClock`: libfaketime's control file on the local
backend, ``backends/common/faketime.py``).

What the driver's wall clock decides in a streaming query (Spark 4, ``ProcessingTimeExecutor`` and
``SystemClock``): when the next micro-batch is triggered (``waitTillTime`` on ``System.currentTimeMillis``),
and each batch's ``batchTimestampMs``, written in ``offsets/N`` (``OffsetSeqMetadata``; what
``current_timestamp()`` and processing-time timeouts read). So:

* ``jump-forward`` – the trigger's pending wait ends at once, the batches planned in the hold carry a
  timestamp :data:`OFFSET_S` ahead, and the return to the real time is a jump back: the wait pending then
  lasts up to :data:`OFFSET_S` longer (a stall the liveness checker sees as a fault window);
* ``jump-back`` – the pending wait now lasts about :data:`OFFSET_S` more: no batch is triggered until the
  skewed clock reaches the planned time, so the turn holds until one batch was planned under the skew
  (at most :data:`OFFSET_S` + :data:`BATCH_WAIT_S`), whose timestamp is :data:`OFFSET_S` behind.

Neither may change what the pipeline writes: the eos sink's transactions are timed by the brokers' clocks.

Evidence, the driver's own view of time: for each batch planned during the turn and after it, its
``batchTimestampMs`` against the time ``offsets/N`` appeared on disk (its mtime: the kernel's real clock,
libfaketime's ``NO_FAKE_STAT``). Effective: a batch planned under the skew measured the offset within
:data:`TOLERANCE_S`, and the first batch after the reset measured 0 within it. Exercised: that skewed batch was
committed (``commits/N``: the pipeline ran a whole batch on the skewed clock).

Heal: the offset back to 0 (at the end of the turn and in :meth:`DriverClockSkew.heal`); the reaper resets the
run's offset files after a SIGKILLed harness (``faketime.reset_noted``).
"""

from __future__ import annotations

import random
import time

from onceproof.backends.base import DriverClock
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.store import checkpoint

VARIANTS = ("jump-forward", "jump-back")
OFFSET_S = 20
"""The jump (s): well inside the timeouts the driver's clock also runs (the in-process standalone master's
60 s worker timeout, ``spark.network.timeout``), far beyond a trigger interval."""
TOLERANCE_S = 3.0
"""How far a batch's measured skew may be from the offset (s): libfaketime's cache, the file's write."""
BATCH_WAIT_S = 15.0
"""How long a turn waits for a batch beyond the hold (s): a trigger interval and a busy machine."""


def batch_skew_s(timestamp_ms: int, planned_at: float) -> float:
    """The driver's clock minus the real one (s) when it planned a batch: its ``batchTimestampMs`` against the
    real time its ``offsets/N`` was written (epoch s). Pure."""
    return round(timestamp_ms / 1000 - planned_at, 3)


def judge(offset_s: float, during: dict | None, after: dict | None) -> bool:
    """Effective: a batch planned under the skew measured ``offset_s`` and the first after the reset 0, each
    within :data:`TOLERANCE_S`. Pure."""
    return (during is not None and abs(during["skew_s"] - offset_s) <= TOLERANCE_S
            and after is not None and abs(after["skew_s"]) <= TOLERANCE_S)


def _has_driver_clock(spark) -> bool:
    return spark is not None and issubclass(type(spark), DriverClock)


def _batch(ckpt, batch: int) -> dict | None:
    """``{"batch", "skew_s", "committed"}`` of batch ``batch`` once ``offsets/N`` is complete, else ``None``."""
    ts = checkpoint.batch_timestamp_ms(ckpt, batch)
    planned, _ = checkpoint.batch_times(ckpt, batch)
    if ts is None or planned is None:
        return None
    return {"batch": batch, "skew_s": batch_skew_s(ts, planned), "committed": checkpoint.has_commit(ckpt, batch)}


class DriverClockSkew:
    """Jump the Spark driver's wall clock 20 s forward or back for the hold (jumping back, until a micro-batch
    was planned under it), then back to the real time; evidence from the batches' own timestamps."""

    name = "driver-clock-skew"
    target_choices = VARIANTS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (``onceproof.nemesis.catalog.expected_s``): the hold (jumping
        back: the stalled trigger's :data:`OFFSET_S`), the batch after the reset and its commit."""
        return max(hold_s, OFFSET_S if target == "jump-back" else 0) + OFFSET_S + 10.0

    def __init__(self, target: str | None = None):
        if target is not None and target not in VARIANTS:
            raise ValueError(f"unknown driver-clock-skew target {target!r}; choose from {', '.join(VARIANTS)}")
        self.target = target

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        variant = self.target or rng.choice(list(VARIANTS))
        spark = ctx.spark
        if not _has_driver_clock(spark):
            return Outcome(SKIPPED, variant, {"reason": "this backend cannot offset the driver's clock"})
        why = spark.driver_clock_unavailable()
        if why:
            return Outcome(SKIPPED, variant, {"reason": why})
        offset = OFFSET_S if variant == "jump-forward" else -OFFSET_S
        ckpt = ctx.checkpoint
        ev: dict = {"variant": variant, "offset_s": offset}
        last = checkpoint.latest_offset_batch(ckpt)
        ev["batch_before"] = _batch(ckpt, last) if last is not None else None
        t0 = time.monotonic()
        try:
            spark.set_driver_clock_offset(offset)
            ev["during"] = self._skewed_batch(ctx, last, offset, t0)
        finally:
            spark.set_driver_clock_offset(0)
        reset_at = checkpoint.latest_offset_batch(ckpt)
        ev["held_s"] = round(time.monotonic() - t0, 2)
        ev["after"] = self._next_batch(ctx, reset_at, OFFSET_S + BATCH_WAIT_S)
        ev["offset_after_s"] = spark.driver_clock_offset()
        during = ev["during"]
        if during is not None and not during["committed"]:
            during.update(_batch(ckpt, during["batch"]) or {})  # its commit may have come since
        effective = judge(offset, during, ev["after"])
        exercised = effective and bool(during and during["committed"])
        if not effective:
            ev["reason"] = ("no batch was planned under the skewed clock" if during is None
                            else "the batches' timestamps did not show the offset")
        return Outcome(EFFECTIVE if effective else NOT_EFFECTIVE, f"{variant}: driver ({offset:+d} s)", ev,
                       exercised=exercised)

    def _skewed_batch(self, ctx: NemesisContext, last: int | None, offset: int, t0: float) -> dict | None:
        """Keep the offset for the hold and until a batch after ``last`` measured it (at most the hold plus
        :data:`OFFSET_S` and :data:`BATCH_WAIT_S`); that batch, or the last one planned, or ``None``."""
        seen = None
        deadline = t0 + max(ctx.hold_s, 0) + OFFSET_S + BATCH_WAIT_S
        n = -1 if last is None else last
        while time.monotonic() < deadline and not ctx.stop.is_set():
            latest = checkpoint.latest_offset_batch(ctx.checkpoint)
            if latest is not None and latest > n:
                b = _batch(ctx.checkpoint, latest)
                if b is not None:
                    seen, n = b, latest
                    if abs(b["skew_s"] - offset) <= TOLERANCE_S and time.monotonic() - t0 >= ctx.hold_s:
                        return b
            ctx.stop.wait(0.2)
        return seen

    @staticmethod
    def _next_batch(ctx: NemesisContext, after: int | None, wait_s: float) -> dict | None:
        """The first batch planned after ``after`` (within ``wait_s`` s), or ``None``."""
        deadline = time.monotonic() + wait_s
        n = -1 if after is None else after
        while time.monotonic() < deadline and not ctx.stop.is_set():
            latest = checkpoint.latest_offset_batch(ctx.checkpoint)
            if latest is not None and latest > n:
                b = _batch(ctx.checkpoint, n + 1)
                if b is not None:
                    return b
            ctx.stop.wait(0.2)
        return None

    def heal(self, ctx: NemesisContext) -> None:
        """The driver's clock back to the real time."""
        if _has_driver_clock(ctx.spark) and ctx.spark.driver_clock_unavailable() is None:
            ctx.spark.set_driver_clock_offset(0)
