"""Transaction-level checks: aborted reads, stuck transactions, and the reader that ran during faults.

Pure functions over frames (no Kafka I/O):

* ``aborted-read`` (Jepsen's G1a) – a record visible at read_committed that belongs to a sink attempt
  *known* to be aborted. Records map to their attempt through the ``op.incarnation`` / ``op.batch`` /
  ``op.sink_partition`` / ``op.attempt`` headers; the sink's own log (``sink.jsonl``, events described in
  ``pipeline/transactional_sink.py``) tells each attempt's outcome (``attempt_outcomes``). An attempt is
  known aborted, and only then, when

  1. ``abort`` – its ``abort_transaction()`` returned (the coordinator accepted EndTxn(ABORT) for the
     producer's current epoch), or
  2. ``abandon`` – it failed before calling ``commit_transaction()``: only EndTxn(COMMIT), which only
     ``commit_transaction()`` sends, commits a Kafka transaction (KIP-98), so it never committed, or
  3. its commit outcome was unknown (``commit-unknown``: ``commit_transaction()`` raised after the
     request may have reached the coordinator) and the marker proves it did not land: another attempt
     B of the same transactional id and batch read the marker after its ``init_transactions()``, found
     it below the batch (``begin`` with ``marker`` < batch; the attempt A itself also began with
     ``marker`` < batch), and then either committed, or aborted with its ``begin`` later than A's.
     Why that is a proof: B's ``init_transactions()`` fenced every older producer of the id and settled
     its transaction: a commit already requested completes, anything else is aborted, and later
     requests of the older epoch are rejected (KIP-98). B's read (``require_stable``, KIP-447) came
     after that, so marker < batch means A's commit had not landed and never will — provided B's
     ``init_transactions()`` came after A's. It did when B committed (had A's come after B's, B's commit
     would have been fenced; had A's come after B's commit, A would have read marker ≥ batch and
     skipped) or when B's abort returned and B began after A did (had A's ``init_transactions()`` come
     after B's abort, A's ``begin`` would be later than B's).

  ``commit-unknown`` attempts that nothing proves aborted are *not* aborted reads: their records may be
  legitimately committed (a later attempt then logs ``skip``), and if another attempt committed the same
  batch too, the exactly-once checker reports the copies as ``duplicate``.

  Attempts are keyed by (incarnation, batch, sink partition, attempt): Spark numbers task attempts from 0
  again in each new driver. Logs and records from before the incarnation existed (no ``incarnation``
  field, no ``op.incarnation`` header) form one unknown incarnation, and their ``abort`` events are
  read as the old sink wrote them — before the abort call, for any error including a failed
  ``commit_transaction()`` — so only those of a delivery error (``kind`` = ``delivery``, raised before the
  commit) or proven by rule 3 count as known aborts. When the records carry no ``op.incarnation`` column
  at all, a (batch, sink partition, attempt) counts as aborted only if no incarnation committed it or
  left its outcome unknown.
* ``aborted-hidden`` (a statistic, not an anomaly) – records the read_uncommitted read sees and the
  read_committed read does not: aborted data that isolation correctly hid.
* ``stuck`` – an output partition whose last stable offset stayed below its high watermark after
  recovery: a transaction left open (Kafka Streams' ``verifyAllTransactionFinished``). Gives
  ``unknown``, since what the open transaction holds cannot be judged yet.
* ``live-duplicate`` / ``live-aborted-read`` – the same duplicate and aborted-read tests on what the
  read_committed reader saw *during* the faults (Kafka's transactions system test's first reader). That
  reader never commits offsets and restarts from the earliest offset after a rebalance, so it may receive
  one output record several times: records are deduplicated by output (partition, offset) first (the
  first sighting kept). A live duplicate is two *distinct* output positions holding the same (key, seq).
  Also end-to-end visibility latency from that reader's first sighting: ``seen_ms - in_ts`` (ms).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from onceproof.checkers.examples import isna as _isna
from onceproof.checkers.examples import plain as _plain

MAX_EXAMPLES = 10
_PROV = {"op.batch": "batch", "op.sink_partition": "sink_partition", "op.attempt": "attempt"}
INCARNATION = "op.incarnation"
KEYS = ["incarnation", "batch", "sink_partition", "attempt"]
UNKNOWN_INCARNATION = ""  # records / events written before the incarnation existed

_OUTCOME_COLS = KEYS + ["txn_id", "outcome", "proof", "error", "begin_marker", "begin_time", "commit_unknown"]


def _norm_ids(values) -> np.ndarray:
    """Incarnation ids as str (object array): ``1``, ``1.0`` and ``"1"`` → ``"1"``; NA → ``""``.
    Converts each distinct value once."""
    codes, uniq = pd.factorize(pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values,
                               use_na_sentinel=True)
    names = []
    for u in uniq:
        if _isna(u):
            names.append(UNKNOWN_INCARNATION)
            continue
        try:
            f = float(u)
            names.append(str(int(f)) if f == int(f) else str(u))
        except (TypeError, ValueError, OverflowError):
            names.append(str(u).strip())
    names.append(UNKNOWN_INCARNATION)  # code -1 (NA)
    return np.asarray(names, dtype=object)[np.asarray(codes)]


def _events(sink_log: pd.DataFrame | None, by_incarnation: bool = True) -> pd.DataFrame | None:
    """Task events of ``sink_log`` with int batch / sink_partition / attempt, str incarnation (``""`` when
    absent, or for every row when not ``by_incarnation``), a ``legacy`` flag (a row without the
    incarnation field: written by the sink before it logged one) and a slot (txn_id, else the partition)."""
    if sink_log is None or sink_log.empty or "event" not in sink_log or \
            not {"batch", "partition", "attempt"} <= set(sink_log.columns):
        return None
    ev = sink_log.dropna(subset=["batch", "partition", "attempt"])
    if ev.empty:
        return None
    inc = ev["incarnation"] if "incarnation" in ev else pd.Series(np.nan, index=ev.index, dtype=object)
    legacy = inc.isna().to_numpy()
    ev = ev.assign(batch=pd.to_numeric(ev["batch"]).astype("int64"),
                   sink_partition=pd.to_numeric(ev["partition"]).astype("int64"),
                   attempt=pd.to_numeric(ev["attempt"]).astype("int64"),
                   incarnation=_norm_ids(inc) if by_incarnation else UNKNOWN_INCARNATION,
                   legacy=legacy,
                   time=pd.to_numeric(ev["time"], errors="coerce") if "time" in ev else np.nan,
                   marker=pd.to_numeric(ev["marker"], errors="coerce") if "marker" in ev else np.nan,
                   kind=ev["kind"] if "kind" in ev else None,
                   error=ev["error"] if "error" in ev else None,
                   txn_id=ev["txn_id"] if "txn_id" in ev else None)
    slot = ev["txn_id"].astype(object)
    na = slot.isna()
    slot[na] = "partition " + ev.loc[na, "sink_partition"].astype(str)
    return ev.assign(slot=slot)


def attempt_outcomes(sink_log: pd.DataFrame | None, by_incarnation: bool = True) -> pd.DataFrame:
    """One row per sink attempt of ``sink_log`` that began, skipped or ended: its outcome and why.

    ``sink_log`` columns (``sink.jsonl``): event, batch, partition, attempt, and when present
    incarnation, time (epoch s), marker, txn_id, error, kind. Returns columns incarnation (str, ``""`` =
    unknown), batch, sink_partition, attempt (int64), txn_id, outcome, proof, error, begin_marker,
    begin_time (epoch s), commit_unknown (bool: a ``commit-unknown`` event). ``outcome``:

    * ``committed`` – a ``commit`` event;
    * ``aborted`` – known aborted, ``proof`` says how (module docstring, rules 1–3);
    * ``unknown`` – ``commit-unknown`` (or an old-format ``abort``) that nothing proves aborted;
    * ``skipped`` – a ``skip`` event only; ``open`` – a ``begin`` with no ending event (the task died).

    With ``by_incarnation`` false every attempt's incarnation is ``""``: an attempt number then stands for
    that number in every incarnation, committed or unknown if any of them was.
    """
    ev = _events(sink_log, by_incarnation)
    if ev is None:
        return pd.DataFrame(columns=_OUTCOME_COLS)
    e = ev["event"].astype(str)
    legacy = ev["legacy"]
    flags = pd.DataFrame({
        "commit": e == "commit",
        # a new-format abort: abort_transaction() returned; an old-format one only for a delivery error
        "abort": (e == "abort") & (~legacy | (ev["kind"].astype(object) == "delivery")),
        "abort_returned": (e == "abort") & ~legacy,  # the old sink logged abort before calling it
        "abandon": e == "abandon",
        "uncertain": (e == "commit-unknown") | ((e == "abort") & legacy & (ev["kind"].astype(object) != "delivery")),
        "skip": e == "skip", "begin": e == "begin", "commit_unknown": e == "commit-unknown",
    })
    g = pd.concat([ev[KEYS], flags], axis=1).groupby(KEYS, sort=True)
    att = g.any()
    first = ev.groupby(KEYS, sort=True)[["txn_id", "slot"]].first()
    # the begin event: the marker read after init_transactions(), and when
    b = ev[flags["begin"].to_numpy()].groupby(KEYS)[["marker", "time"]].min()
    att = att.join(first).join(b.rename(columns={"marker": "begin_marker", "time": "begin_time"}))
    ends = ev[(flags["abort"] | flags["abandon"] | flags["uncertain"]).to_numpy()]
    if len(ends):
        att = att.join(ends.groupby(KEYS)["error"].last().rename("error"))
    else:  # no attempt ended badly: an empty Series has no index names to join on
        att = att.assign(error=pd.Series(pd.NA, index=att.index, dtype=object))
    att = att.reset_index()

    outcome = np.select(
        [att["commit"], att["abort"] | att["abandon"], att["uncertain"], att["begin"], att["skip"]],
        ["committed", "aborted", "unknown", "open", "skipped"], default="other")
    proof = np.select([att["commit"], att["abort"], att["abandon"]],
                      ["", "abort_transaction() returned",
                       "failed before commit_transaction() (abandon): never asked to commit"], default="")
    att = att.assign(outcome=outcome, proof=proof)

    # rule 3: an unknown outcome proven aborted by another attempt's marker read
    unk = att[(att["outcome"] == "unknown") & (att["begin_marker"] < att["batch"])]
    if len(unk):
        read_low = (att["begin_marker"] < att["batch"])
        witness = att[read_low & (att["commit"] | ((att["outcome"] == "aborted") & att["abort_returned"]))]
        m = unk.reset_index().merge(witness[KEYS + ["slot", "commit", "begin_time", "begin_marker"]],
                                    on=["slot", "batch"], suffixes=("", "_w"))
        other = ~((m["incarnation"] == m["incarnation_w"]) & (m["sink_partition"] == m["sink_partition_w"])
                  & (m["attempt"] == m["attempt_w"]))
        ok = other & (m["commit_w"] | (m["begin_time_w"] > m["begin_time"]))
        m = m[ok].drop_duplicates("index")
        if len(m):
            why = ("incarnation " + m["incarnation_w"].astype(str) + " attempt " + m["attempt_w"].astype(str)
                   + " of the same batch read marker " + m["begin_marker_w"].astype("int64").astype(str)
                   + " < batch after fencing this attempt, then "
                   + np.where(m["commit_w"], "committed", "aborted") + ": this commit never landed")
            att.loc[m["index"].to_numpy(), "outcome"] = "aborted"
            att.loc[m["index"].to_numpy(), "proof"] = why.to_numpy()
    return att[_OUTCOME_COLS].reset_index(drop=True)


def aborted_attempts(sink_log: pd.DataFrame | None, by_incarnation: bool = True) -> pd.DataFrame:
    """The attempts of ``sink_log`` known to be aborted (``attempt_outcomes`` with outcome ``aborted``):
    columns incarnation, batch, sink_partition, attempt, txn_id, error, proof."""
    o = attempt_outcomes(sink_log, by_incarnation)
    return o[o["outcome"] == "aborted"][KEYS + ["txn_id", "error", "proof"]].reset_index(drop=True)


def _attempt_rows(records: pd.DataFrame, ab: pd.DataFrame, by_incarnation: bool) -> pd.DataFrame:
    """Rows of ``records`` whose (incarnation, batch, sink partition, attempt) headers name an attempt
    of ``ab``, with those four as columns. Cheap on large frames: the header columns are factorised and
    only the rows of an aborted batch are converted and joined."""
    bcodes, buniq = pd.factorize(records["op.batch"])
    bnum = pd.to_numeric(pd.Series(buniq, dtype=object), errors="coerce").to_numpy(dtype=float)
    want = np.isin(bnum, ab["batch"].to_numpy(dtype=float))
    rows = np.flatnonzero(want[bcodes] & (bcodes >= 0)) if want.any() else np.zeros(0, np.int64)
    r = records.iloc[rows]
    if r.empty:
        return r.assign(**{k: pd.Series(dtype=object) for k in KEYS})
    keys = {v: pd.to_numeric(r[c], errors="coerce") for c, v in _PROV.items()}
    r = r.assign(**keys)
    r = r.dropna(subset=list(_PROV.values())).astype({c: "int64" for c in _PROV.values()})
    inc = _norm_ids(r[INCARNATION]) if by_incarnation and INCARNATION in r else UNKNOWN_INCARNATION
    return r.assign(incarnation=inc)


def aborted_reads(records: pd.DataFrame, sink_log: pd.DataFrame) -> tuple[int, list[dict]]:
    """Count and examples of ``records`` (read at read_committed) that belong to known-aborted attempts.

    ``records`` needs ``op.batch``, ``op.sink_partition``, ``op.attempt`` (strings or numbers) and may
    have ``op.incarnation``; without that column the attempts are matched without incarnation (see
    ``attempt_outcomes``). Each example: key, seq, partition, offset, incarnation, batch, sink_partition,
    attempt, op.txn_id, error and proof (why the attempt is known aborted), when present.
    """
    if records is None or records.empty or not set(_PROV) <= set(records.columns):
        return 0, []
    by_inc = INCARNATION in records.columns
    ab = aborted_attempts(sink_log, by_incarnation=by_inc)
    if ab.empty:
        return 0, []
    r = _attempt_rows(records, ab, by_inc)
    if r.empty:
        return 0, []
    hit = r.merge(ab.drop(columns=["txn_id"]), on=KEYS, how="inner")
    if "offset" in hit.columns:
        hit = hit.sort_values([c for c in ("partition", "offset") if c in hit.columns], kind="stable")
    cols = [c for c in ("key", "seq", "partition", "offset", "incarnation", "batch", "sink_partition", "attempt",
                        "op.txn_id", "error", "proof") if c in hit.columns]
    ex = [{k.removeprefix("op."): _plain(v) for k, v in d.items() if not _isna(v) and v != ""}
          for d in hit[cols].head(MAX_EXAMPLES).to_dict("records")]
    return int(len(hit)), ex


def aborted_read_count(attempts: pd.DataFrame, sink_log: pd.DataFrame | None) -> int:
    """Records read at read_committed that belong to known-aborted attempts, counted from one row per
    attempt seen: ``attempts`` has ``op.batch``, ``op.sink_partition``, ``op.attempt`` (and, when the
    records carry it, ``op.incarnation``) plus ``n``, the records seen of that attempt. The same rule as
    :func:`aborted_reads`, for a reader that keeps counts, not records (a session's live view)."""
    if attempts is None or attempts.empty or not set(_PROV) <= set(attempts.columns):
        return 0
    by_inc = INCARNATION in attempts.columns
    ab = aborted_attempts(sink_log, by_incarnation=by_inc)
    if ab.empty:
        return 0
    r = _attempt_rows(attempts, ab, by_inc)
    if r.empty:
        return 0
    return int(r.merge(ab[KEYS].drop_duplicates(), on=KEYS, how="inner")["n"].sum())


def hidden_aborted(uncommitted: pd.DataFrame | None, committed: pd.DataFrame) -> int:
    """Records at read_uncommitted that read_committed did not return (by partition and offset).

    ``partition``/``offset`` must be integer columns without NA. Per partition, a bitmap of the committed
    offsets over their range (a topic's offsets are dense, up to transaction markers and aborted
    records): one byte per offset and one int64 per record of temporary memory, no sort and no
    per-record Python; ranges wider than 4 bytes per record fall back to ``np.isin``."""
    if uncommitted is None or uncommitted.empty:
        return 0
    up, uo = _int_view(uncommitted["partition"]), _int_view(uncommitted["offset"])
    if committed is None or committed.empty:
        return int(len(up))
    cp, co = _int_view(committed["partition"]), _int_view(committed["offset"])
    pmax = int(max(up.max(), cp.max()))
    if min(up.min(), cp.min()) < 0 or pmax >= (1 << 20):
        return _hidden_by_isin(up, uo, cp, co)
    lo = np.full(pmax + 1, np.iinfo(np.int64).max)
    hi = np.full(pmax + 1, -1, np.int64)
    span = pd.Series(co).groupby(cp).agg(["min", "max"])
    lo[span.index.to_numpy()], hi[span.index.to_numpy()] = span["min"].to_numpy(), span["max"].to_numpy()
    width = np.where(hi >= lo, hi - lo + 1, 0)
    total = int(width.sum())
    if total > 4 * len(co) + 1024:
        return _hidden_by_isin(up, uo, cp, co)
    shift = np.cumsum(width) - width - np.where(hi >= lo, lo, 0)  # bitmap index of (p, o) = shift[p] + o
    seen = np.zeros(total, bool)
    at = shift[cp]
    at += co
    seen[at] = True
    del at
    inside = (uo >= lo[up]) & (uo <= hi[up])  # a committed partition's range holds it
    at = shift[up[inside]]
    at += uo[inside]
    return int(len(up) - np.count_nonzero(seen[at]))


def _int_view(s: pd.Series) -> np.ndarray:
    """An integer column as a numpy array, without a copy when its dtype already is a numpy int."""
    return s.to_numpy() if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iu" else s.to_numpy(dtype=np.int64)


def _hidden_by_isin(up: np.ndarray, uo: np.ndarray, cp: np.ndarray, co: np.ndarray) -> int:
    key_u = up.astype(np.int64) * (1 << 40) + uo
    key_c = cp.astype(np.int64) * (1 << 40) + co
    return int((~np.isin(key_u, key_c)).sum())


def stuck(lso: dict[int, int], hw: dict[int, int]) -> list[dict]:
    """Partitions whose LSO is below the high watermark: ``[{"partition", "lso", "hw"}]``."""
    return [{"partition": int(p), "lso": int(lso.get(p, -1)), "hw": int(h)}
            for p, h in sorted(hw.items()) if lso.get(p, -1) != h]


def distinct_positions(live: pd.DataFrame) -> pd.DataFrame:
    """``live`` with one row per output (partition, offset): the first sighting (smallest ``seen_ms``,
    then the earliest row). A reader that re-consumes an offset saw the same record again, not a copy."""
    if live.empty or not {"partition", "offset"} <= set(live.columns):
        return live
    order = live
    if "seen_ms" in live.columns:
        seen = pd.to_numeric(live["seen_ms"], errors="coerce")
        order = live.iloc[np.argsort(seen.to_numpy(dtype=float, na_value=np.inf), kind="stable")]
    return order[~order.duplicated(["partition", "offset"], keep="first")].sort_index(kind="stable")


def live_view(live: pd.DataFrame | None, sink_log: pd.DataFrame, uniq: pd.DataFrame | None = None) -> dict:
    """Duplicates and aborted reads in the during-faults reader's view, and its visibility latency.

    ``live`` columns: partition, offset, key, seq, in_ts (epoch ms), seen_ms (epoch ms), provenance
    headers; one row per record *received*, so a re-delivered offset appears more than once.
    Returns ``{"counts": {"live-duplicate", "live-aborted-read"}, "anomalies": {...},
    "latency_ms": {"p50", "p99", "max", "n"}, "records": distinct output positions seen,
    "rereads": receptions beyond the first of a position}``. ``live-duplicate`` counts input records held
    by two or more distinct output positions (named by their ``op.input`` header when they carry one,
    else by (key, seq)); each example lists every position once.
    """
    out = {"counts": {"live-duplicate": 0, "live-aborted-read": 0},
           "anomalies": {"live-duplicate": [], "live-aborted-read": []}, "latency_ms": {}, "records": 0,
           "rereads": 0}
    if live is None or live.empty:
        return out
    uniq = distinct_positions(live) if uniq is None else uniq
    out["records"], out["rereads"] = int(len(uniq)), int(len(live) - len(uniq))
    ok = uniq.dropna(subset=["seq"])
    # one input record seen at two output positions: copies carrying op.input are told apart by it (an
    # input log holding the same (key, seq) twice owes two copies, checkers/exactly_once.py), the others
    # by (key, seq)
    ident = ok["seq"].astype("string")
    if "op.input" in ok.columns:
        ref = ok["op.input"].astype("string")
        ident = ref.where(ref.notna(), "seq:" + ident)
    ok = ok.assign(_ident=ident)
    dup = ok[ok.duplicated(["key", "_ident"], keep=False)]
    if len(dup):
        dup = dup.sort_values([c for c in ("partition", "offset") if c in dup.columns], kind="stable")
    pairs = dup.groupby(["key", "_ident"], sort=False).size() if len(dup) else pd.Series(dtype=int)
    out["counts"]["live-duplicate"] = int(len(pairs))
    for (k, _i), g in list(dup.groupby(["key", "_ident"], sort=False))[:MAX_EXAMPLES]:
        s = g["seq"].iloc[0]
        cols = [c for c in ("partition", "offset", "op.incarnation", "op.batch", "op.attempt", "op.txn_id",
                            "op.input", "seen_ms") if c in g]
        out["anomalies"]["live-duplicate"].append(
            {"key": k, "seq": int(s),
             "copies": [{c.removeprefix("op."): _plain(v) for c, v in r.items() if not _isna(v)}
                        for r in g[cols].to_dict("records")]})
    n, ex = aborted_reads(uniq, sink_log)
    out["counts"]["live-aborted-read"], out["anomalies"]["live-aborted-read"] = n, ex
    if {"seen_ms", "in_ts"} <= set(uniq.columns):
        lat = (pd.to_numeric(uniq["seen_ms"], errors="coerce") - pd.to_numeric(uniq["in_ts"], errors="coerce")).dropna()
        if len(lat):
            out["latency_ms"] = {"p50": float(lat.quantile(0.5)), "p99": float(lat.quantile(0.99)),
                                 "max": float(lat.max()), "n": int(len(lat))}
    return out
