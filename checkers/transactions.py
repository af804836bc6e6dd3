"""Transaction-level checks: aborted reads, stuck transactions, and the reader that ran during faults.

Pure functions over frames (no Kafka I/O):

* ``aborted-read`` (Jepsen's G1a) – a record visible at read_committed that the sink's own log
  (``sink.jsonl``) says belongs to an aborted attempt: an ``abort`` event for (batch, sink partition,
  attempt) with no ``commit`` by that attempt. Records carry ``op.batch`` / ``op.sink_partition`` /
  ``op.attempt`` headers, so each one maps to its attempt.
* ``aborted-hidden`` (a statistic, not an anomaly) – records the read_uncommitted read sees and the
  read_committed read does not: aborted data that isolation correctly hid.
* ``stuck`` – an output partition whose last stable offset stayed below its high watermark after
  recovery: a transaction left open (Kafka Streams' ``verifyAllTransactionFinished``). Gives
  ``unknown``, since what the open transaction holds cannot be judged yet.
* ``live-duplicate`` / ``live-aborted-read`` – the same duplicate and aborted-read tests on what the
  read_committed reader saw *during* the faults (Kafka's transactions system test's first reader).
  Also end-to-end visibility latency from that reader: ``seen_ms - in_ts`` (ms).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checkers.examples import isna as _isna, plain as _plain

MAX_EXAMPLES = 10
_PROV = {"op.batch": "batch", "op.sink_partition": "sink_partition", "op.attempt": "attempt"}


def aborted_attempts(sink_log: pd.DataFrame) -> pd.DataFrame:
    """(batch, sink_partition, attempt) with an ``abort`` and no ``commit`` event, plus the abort's error.

    ``sink_log`` columns: event, batch, partition, attempt (and error, txn_id when present).
    """
    if sink_log is None or sink_log.empty or "event" not in sink_log:
        return pd.DataFrame(columns=["batch", "sink_partition", "attempt", "error"])
    ev = sink_log.dropna(subset=["batch", "partition", "attempt"])
    ev = ev.assign(batch=ev["batch"].astype("int64"), sink_partition=ev["partition"].astype("int64"),
                   attempt=ev["attempt"].astype("int64"))
    keys = ["batch", "sink_partition", "attempt"]
    aborted = ev[ev["event"] == "abort"].drop_duplicates(keys)
    committed = ev[ev["event"] == "commit"][keys].drop_duplicates()
    m = aborted.merge(committed.assign(_c=True), on=keys, how="left")
    out = m[m["_c"].isna()]
    cols = keys + [c for c in ("error", "txn_id") if c in out.columns]
    return out[cols].reset_index(drop=True)


def _with_attempt_keys(records: pd.DataFrame) -> pd.DataFrame | None:
    if records is None or records.empty or not set(_PROV) <= set(records.columns):
        return None
    r = records.dropna(subset=list(_PROV)).rename(columns=_PROV)
    for c in _PROV.values():
        r[c] = pd.to_numeric(r[c], errors="coerce")
    return r.dropna(subset=list(_PROV.values())).astype({c: "int64" for c in _PROV.values()})


def aborted_reads(records: pd.DataFrame, sink_log: pd.DataFrame) -> tuple[int, list[dict]]:
    """Count and examples of ``records`` (read at read_committed) from aborted attempts."""
    r = _with_attempt_keys(records)
    ab = aborted_attempts(sink_log)
    if r is None or ab.empty:
        return 0, []
    hit = r.merge(ab, on=["batch", "sink_partition", "attempt"], how="inner")
    cols = [c for c in ("key", "seq", "partition", "offset", "batch", "sink_partition", "attempt",
                        "op.txn_id", "error") if c in hit.columns]
    ex = [{k: _plain(v) for k, v in d.items() if not _isna(v)} for d in hit[cols].head(MAX_EXAMPLES).to_dict("records")]
    return int(len(hit)), ex


def hidden_aborted(uncommitted: pd.DataFrame | None, committed: pd.DataFrame) -> int:
    """Records at read_uncommitted that read_committed did not return (by partition and offset)."""
    if uncommitted is None or uncommitted.empty:
        return 0
    u = uncommitted[["partition", "offset"]].astype("int64")
    c = committed[["partition", "offset"]].astype("int64") if len(committed) else u.iloc[:0]
    key_u = u["partition"].to_numpy() * (1 << 40) + u["offset"].to_numpy()
    key_c = c["partition"].to_numpy() * (1 << 40) + c["offset"].to_numpy()
    return int((~np.isin(key_u, key_c)).sum())


def stuck(lso: dict[int, int], hw: dict[int, int]) -> list[dict]:
    """Partitions whose LSO is below the high watermark: ``[{"partition", "lso", "hw"}]``."""
    return [{"partition": int(p), "lso": int(lso.get(p, -1)), "hw": int(h)}
            for p, h in sorted(hw.items()) if lso.get(p, -1) != h]


def live_view(live: pd.DataFrame | None, sink_log: pd.DataFrame) -> dict:
    """Duplicates and aborted reads in the during-faults reader's view, and its visibility latency.

    Returns ``{"counts": {"live-duplicate", "live-aborted-read"}, "anomalies": {...},
    "latency_ms": {"p50", "p99", "max", "n"}, "records": n}``.
    """
    out = {"counts": {"live-duplicate": 0, "live-aborted-read": 0},
           "anomalies": {"live-duplicate": [], "live-aborted-read": []}, "latency_ms": {}, "records": 0}
    if live is None or live.empty:
        return out
    out["records"] = int(len(live))
    ok = live.dropna(subset=["seq"])
    dup = ok[ok.duplicated(["key", "seq"], keep=False)]
    pairs = dup.groupby(["key", "seq"]).size() if len(dup) else pd.Series(dtype=int)
    out["counts"]["live-duplicate"] = int(len(pairs))
    for (k, s), g in list(dup.groupby(["key", "seq"]))[:MAX_EXAMPLES]:
        cols = [c for c in ("partition", "offset", "op.batch", "op.attempt", "op.txn_id", "seen_ms") if c in g]
        out["anomalies"]["live-duplicate"].append(
            {"key": k, "seq": int(s), "copies": [{c.removeprefix("op."): _plain(v) for c, v in r.items()}
                                                  for r in g[cols].to_dict("records")]})
    n, ex = aborted_reads(live, sink_log)
    out["counts"]["live-aborted-read"], out["anomalies"]["live-aborted-read"] = n, ex
    lat = (pd.to_numeric(live["seen_ms"], errors="coerce") - pd.to_numeric(live["in_ts"], errors="coerce")).dropna()
    if len(lat):
        out["latency_ms"] = {"p50": float(lat.quantile(0.5)), "p99": float(lat.quantile(0.99)),
                             "max": float(lat.max()), "n": int(len(lat))}
    return out
