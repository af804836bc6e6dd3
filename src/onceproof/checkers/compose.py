"""Combine the exactly-once checker's result with the transaction-level checks (Jepsen's
``checker/compose``): one result dict, one verdict.

Verdict: ``invalid`` if any definite anomaly (the exactly-once checker's — including those it made
definite for this run, listed in its result's ``definite``, e.g. ``input-duplicate`` when a workload
history is present — ``aborted-read``, ``live-duplicate``, ``live-aborted-read``, and the liveness
checker's ``no-recovery``, ``hanging-transaction``, ``late-visibility``); else ``unknown`` if
recovery did not finish or a partition is ``stuck``; else the exactly-once checker's verdict (``invalid``
when something is lost).
"""

from __future__ import annotations

import pandas as pd

from onceproof.checkers import exactly_once, liveness, platform, transactions

DEFINITE = exactly_once.DEFINITE + ("aborted-read", "live-duplicate", "live-aborted-read") + liveness.ANOMALIES
ANOMALIES = exactly_once.ANOMALIES + ("aborted-read", "stuck", "live-duplicate", "live-aborted-read") \
    + liveness.ANOMALIES


def combine(base: dict, *, output: pd.DataFrame, sink_log: pd.DataFrame | None = None,
            uncommitted: pd.DataFrame | None = None, live: pd.DataFrame | None = None,
            lso: dict[int, int] | None = None, hw: dict[int, int] | None = None,
            aborted_hidden: int | None = None, live_check: dict | None = None, strict: bool = False,
            live_distinct: pd.DataFrame | None = None) -> dict:
    """Add ``aborted-read``, ``stuck``, ``live-*`` and the statistics ``aborted_attempts`` (sink attempts
    known aborted), ``commit_unknown_attempts`` / ``commit_unknown_unresolved`` (attempts whose
    ``commit_transaction()`` raised / of those, the ones no marker read proved aborted),
    ``aborted_hidden``, ``live_records`` (distinct output positions the live reader saw),
    ``live_rereads`` (its receptions of an already seen position) and ``visibility_latency_ms`` to
    ``base`` (the result of ``exactly_once.check``) and recompute its verdict. ``aborted_hidden``, when
    given, is that statistic already counted (``transactions.hidden_aborted``; ``uncommitted`` unused).
    ``live_check``: the liveness checker's result (``checkers/liveness.check``): its anomalies join the
    counts, its statistics go to ``stats["liveness"]``. The input log's anomalies are platform findings
    (``checkers/platform.py``, ``result["platform_findings"]``), left out of the verdict unless ``strict``.
    ``live_distinct``: ``transactions.distinct_positions(live)`` when the caller already has it."""
    r = dict(base)
    counts, anomalies, stats = dict(r["counts"]), dict(r["anomalies"]), dict(r.get("stats", {}))
    sink_log = sink_log if sink_log is not None else pd.DataFrame()
    n, ex = transactions.aborted_reads(output, sink_log)
    counts["aborted-read"], anomalies["aborted-read"] = n, ex
    st = transactions.stuck(lso or {}, hw or {}) if hw else []
    counts["stuck"], anomalies["stuck"] = len(st), st
    lv = transactions.live_view(live, sink_log, live_distinct)
    counts.update(lv["counts"])
    anomalies.update(lv["anomalies"])
    outcomes = transactions.attempt_outcomes(sink_log)
    stats["aborted_attempts"] = int((outcomes["outcome"] == "aborted").sum())
    cu = outcomes["commit_unknown"].astype(bool)
    stats["commit_unknown_attempts"] = int(cu.sum())
    stats["commit_unknown_unresolved"] = int((cu & (outcomes["outcome"] == "unknown")).sum())
    stats["aborted_hidden"] = aborted_hidden if aborted_hidden is not None else \
        transactions.hidden_aborted(uncommitted, output)
    stats["live_records"] = lv["records"]
    stats["live_rereads"] = lv["rereads"]
    stats["visibility_latency_ms"] = lv["latency_ms"]
    if live_check is not None:
        counts.update(live_check["counts"])
        anomalies.update(live_check["anomalies"])
        stats["liveness"] = live_check["stats"]
    reasons = list(r.get("unknown_reasons", []))
    if st:
        reasons.append(f"stuck: open transaction on output partitions {[s['partition'] for s in st]}")
    findings, excluded = platform.split(counts, strict)
    definite = tuple(a for a in dict.fromkeys(DEFINITE + tuple(r.get("definite", ()))) if a not in excluded)
    base = r["verdict"]
    if base == "invalid" and excluded and platform.only_platform(r["counts"], excluded):
        base = "unknown" if r.get("unknown_reasons") else "valid"  # invalid only for the input log's sake
    if any(counts.get(a) for a in definite):
        verdict = "invalid"
    elif base == "unknown" or st:
        verdict = "unknown"
    else:
        verdict = base
    r.update(verdict=verdict, valid={"valid": True, "invalid": False}.get(verdict, "unknown"),
             counts=counts, anomalies=anomalies, stats=stats, unknown_reasons=reasons if verdict == "unknown" else [],
             definite=list(definite))
    if findings:
        r["platform_findings"] = findings
    return r

