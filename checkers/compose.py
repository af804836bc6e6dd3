"""Combine the exactly-once checker's result with the transaction-level checks (Jepsen's
``checker/compose``): one result dict, one verdict.

Verdict: ``invalid`` if any definite anomaly (the exactly-once checker's, ``aborted-read``,
``live-duplicate``, ``live-aborted-read``); else ``unknown`` if recovery did not finish or a partition
is ``stuck``; else the exactly-once checker's verdict (``invalid`` when something is lost).
"""

from __future__ import annotations

import pandas as pd

from checkers import exactly_once, transactions

DEFINITE = exactly_once.DEFINITE + ("aborted-read", "live-duplicate", "live-aborted-read")
ANOMALIES = exactly_once.ANOMALIES + ("aborted-read", "stuck", "live-duplicate", "live-aborted-read")


def combine(base: dict, *, output: pd.DataFrame, sink_log: pd.DataFrame | None = None,
            uncommitted: pd.DataFrame | None = None, live: pd.DataFrame | None = None,
            lso: dict[int, int] | None = None, hw: dict[int, int] | None = None) -> dict:
    """Add ``aborted-read``, ``stuck``, ``live-*`` and the ``aborted_hidden`` / ``visibility_latency_ms``
    statistics to ``base`` (the result of ``exactly_once.check``) and recompute its verdict."""
    r = dict(base)
    counts, anomalies, stats = dict(r["counts"]), dict(r["anomalies"]), dict(r.get("stats", {}))
    sink_log = sink_log if sink_log is not None else pd.DataFrame()
    n, ex = transactions.aborted_reads(output, sink_log)
    counts["aborted-read"], anomalies["aborted-read"] = n, ex
    st = transactions.stuck(lso or {}, hw or {}) if hw else []
    counts["stuck"], anomalies["stuck"] = len(st), st
    lv = transactions.live_view(live, sink_log)
    counts.update(lv["counts"])
    anomalies.update(lv["anomalies"])
    stats["aborted_attempts"] = int(len(transactions.aborted_attempts(sink_log)))
    stats["aborted_hidden"] = transactions.hidden_aborted(uncommitted, output)
    stats["live_records"] = lv["records"]
    stats["visibility_latency_ms"] = lv["latency_ms"]
    reasons = list(r.get("unknown_reasons", []))
    if st:
        reasons.append(f"stuck: open transaction on output partitions {[s['partition'] for s in st]}")
    if any(counts.get(a) for a in DEFINITE):
        verdict = "invalid"
    elif r["verdict"] == "unknown" or st:
        verdict = "unknown"
    else:
        verdict = r["verdict"]
    r.update(verdict=verdict, valid={"valid": True, "invalid": False}.get(verdict, "unknown"),
             counts=counts, anomalies=anomalies, stats=stats, unknown_reasons=reasons if verdict == "unknown" else [])
    return r
