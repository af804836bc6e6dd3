"""``commit-delay``: widen the exactly-once protocol's windows through the pipeline's hooks
(``pipeline/hooks.py``), switched at run time by files in ``<run>/control`` – never a restart.

Variants (targets):

* ``precommit`` – every sink task sleeps between ``flush()`` and ``commit_transaction()`` for ``hold_s``;
  evidence: the sink's commit events that report the delay.
* ``notify`` – the driver sleeps between the sink's commit and Spark's ``commits/N`` (the
  commit-notification window) for ``hold_s``; evidence: the driver's ``commit-notify.jsonl`` entries.
* ``txn-timeout`` – one sink task holds its open transaction for ``transaction.timeout.ms`` + 5 s, so
  the broker aborts it and bumps the producer epoch; the commit must fail and the task be retried (a
  clean abort and replay), never silently lose the rows. Evidence: the hold, the abort of that
  (batch, partition), and the later commit of the same (batch, partition) by a retry.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, NemesisContext, Outcome, sink_events
from onceproof.pipeline import hooks
from onceproof.sinks.base import DRIVER_HOOKS, PRECOMMIT_HOOK, TRANSACTIONS

VARIANTS = ("precommit", "notify", "txn-timeout")
FAILED_ATTEMPT = ("abort", "abandon", "commit-unknown", "abort-failed")  # sink.jsonl events of a failed attempt


class CommitDelay:
    name = "commit-delay"
    target_choices = VARIANTS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        if target in ("txn-timeout", ""):  # past transaction.timeout.ms, then the abort and the retry
            return txn_timeout_ms / 1000 + 20.0
        return max(hold_s, 6.0) + 2.0

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """Sink capabilities (``sinks/base.py``) variant ``target`` needs: ``precommit`` the tasks'
        pre-commit hook, ``txn-timeout`` that hook and a Kafka transaction to time out, ``notify`` the
        driver's after-commit hook."""
        return {"precommit": frozenset({PRECOMMIT_HOOK}),
                "txn-timeout": frozenset({PRECOMMIT_HOOK, TRANSACTIONS}),
                "notify": frozenset({DRIVER_HOOKS})}.get(target, frozenset())

    def __init__(self, target: str | None = None, delay_ms: int = 2000, txn_timeout_ms: int = 30000):
        if target is not None and target not in VARIANTS:
            raise ValueError(f"unknown commit-delay variant {target!r}; choose from {', '.join(VARIANTS)}")
        self.target, self.delay_ms, self.txn_timeout_ms = target, delay_ms, txn_timeout_ms

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        variant = self.target or rng.choice(list(VARIANTS))
        run_dir = ctx.control.parent
        t0 = time.time()
        if variant == "precommit":
            (ctx.control / hooks.PRECOMMIT_DELAY).write_text(str(self.delay_ms))

            def seen():
                return [e for e in sink_events(run_dir, t0)
                        if e["event"] == "commit" and e.get("precommit_delay_ms", 0) > 0]
            held = self._hold_until(ctx, seen)
            (ctx.control / hooks.PRECOMMIT_DELAY).unlink(missing_ok=True)
            delayed = seen()
            ev = {"delay_ms": self.delay_ms, "held_s": held, "delayed_commits": len(delayed),
                  "examples": [{k: e[k] for k in ("batch", "partition", "attempt")} for e in delayed[:3]]}
            return Outcome(EFFECTIVE if delayed else NOT_EFFECTIVE, "precommit", ev)
        if variant == "notify":
            (ctx.control / hooks.NOTIFY_DELAY).write_text(str(self.delay_ms))
            p = ctx.control / hooks.NOTIFY_LOG

            def seen():
                if not p.exists():
                    return []
                return [e for e in map(json.loads, p.read_text().splitlines()) if e["time"] >= t0]
            held = self._hold_until(ctx, seen)
            (ctx.control / hooks.NOTIFY_DELAY).unlink(missing_ok=True)
            hits = seen()
            ev = {"delay_ms": self.delay_ms, "held_s": held, "delayed_batches": [e["batch"] for e in hits]}
            return Outcome(EFFECTIVE if hits else NOT_EFFECTIVE, "notify", ev)
        return self._txn_timeout(ctx, run_dir, t0)

    def _hold_until(self, ctx: NemesisContext, seen, max_s: float = 60.0) -> float:
        """Keep the delay on for at least ``hold_s`` and until ``seen()`` shows it applied (≤ ``max_s``):
        a batch may not reach the hook while the pipeline is restarting."""
        t = time.monotonic()
        min_s = max(ctx.hold_s, 3 * self.delay_ms / 1000)
        while not ctx.stop.is_set():
            el = time.monotonic() - t
            if (el >= min_s and seen()) or el >= max_s:
                break
            ctx.stop.wait(0.5)
        return round(time.monotonic() - t, 2)

    def _txn_timeout(self, ctx: NemesisContext, run_dir: Path, t0: float) -> Outcome:
        hold_ms = self.txn_timeout_ms + 5000
        (ctx.control / hooks.PRECOMMIT_HOLD).write_text(str(hold_ms))
        deadline = time.monotonic() + hold_ms / 1000 + 60
        ev: dict = {"hold_ms": hold_ms, "transaction_timeout_ms": self.txn_timeout_ms}
        held = None
        while time.monotonic() < deadline and not ctx.stop.is_set():
            events = sink_events(run_dir, t0)
            held = held or next((e for e in events if e["event"] == "hold"), None)
            if held:
                key = (held["batch"], held["partition"])
                # the held transaction must fail: the sink logs "abort" (abort_transaction() returned),
                # "abandon" (fenced before its commit: the broker aborted it), or "commit-unknown" /
                # "abort-failed" (the commit call itself failed) — pipeline/transactional_sink.py
                aborts = [e for e in events if e["event"] in FAILED_ATTEMPT and (e["batch"], e["partition"]) == key]
                later = [e for e in events if e["event"] in ("commit", "skip")
                         and (e["batch"], e["partition"]) == key and e["time"] > held["time"]]
                if aborts and later:
                    ev.update(held={k: held[k] for k in ("batch", "partition", "attempt", "txn_id")},
                              abort={"event": aborts[0]["event"], "error": aborts[0].get("error"),
                                     "kind": aborts[0].get("kind")},
                              retried_by_attempt=later[0]["attempt"], retry_event=later[0]["event"])
                    return Outcome(EFFECTIVE, "txn-timeout", ev)
            time.sleep(0.5)
        self.heal(ctx)
        ev["reason"] = "no hold observed" if held is None else "hold seen but no abort+retry observed"
        if held:
            ev["held"] = {k: held[k] for k in ("batch", "partition", "attempt")}
        return Outcome(NOT_EFFECTIVE, "txn-timeout", ev)

    def heal(self, ctx: NemesisContext) -> None:
        """Remove every delay switch (a claimed hold ends by itself)."""
        for f in (hooks.PRECOMMIT_DELAY, hooks.NOTIFY_DELAY, hooks.PRECOMMIT_HOLD):
            (ctx.control / f).unlink(missing_ok=True)
