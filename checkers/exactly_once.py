"""The exactly-once checker: per key, every input record appears in the output exactly once, in order.

Pure: it takes frames and returns a dict; it never talks to Kafka (``harness/`` reads the topics).

Inputs (pandas DataFrames):

* ``history`` – workload ops with columns ``type`` (invoke/ok/fail/info), ``f``, ``key``, ``seq``; may be
  empty (``onceproof check`` on a foreign pipeline has none).
* ``input`` – the input topic read at read_committed: ``key`` (str), ``seq`` (int), ``partition``,
  ``offset``.
* ``output`` – the output topic read at read_committed after recovery: ``key``, ``seq`` (Int64, NA when
  the value could not be parsed), ``partition``, ``offset`` and optional provenance columns named as
  in ``pipeline/provenance.py`` (``op.batch``, ``op.attempt``, ...).

Anomalies (DESIGN §4; Jepsen's names where they fit):

* ``duplicate`` – a (key, seq) appears more than once in the output. Counted as (key, seq) pairs;
  ``duplicate-records`` counts the extra copies.
* ``lost`` – a (key, seq) of the input log never appears in the output.
* ``lost-write`` – a send acknowledged ``ok`` in the history is absent from the input log.
* ``unexpected`` – an output (key, seq) not in the input log, or an output value without key/seq.
* ``nonmonotonic`` – per key, the output's *first* occurrences go backwards relative to the input
  order (a re-emitted copy is a ``duplicate``, not also a reordering).

``info`` sends are neither required nor forbidden (Jepsen): only what reached the input log is owed.

Verdict: ``invalid`` if any definite anomaly (duplicate, unexpected, nonmonotonic, lost-write) is found;
otherwise ``unknown`` if recovery did not finish (``lost`` cannot be told from "not yet"); otherwise
``invalid`` if anything is lost, else ``valid``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

ANOMALIES = ("duplicate", "lost", "lost-write", "unexpected", "nonmonotonic")
DEFINITE = ("duplicate", "unexpected", "nonmonotonic", "lost-write")
MAX_EXAMPLES = 10


@dataclass
class Recovery:
    """Whether the pipeline caught up before the check: ``finished`` false → verdict at best unknown."""

    finished: bool = True
    reasons: list[str] = field(default_factory=list)


def _prov_cols(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith("op.")]


def _records(df: pd.DataFrame, cols: list[str]) -> list[dict]:
    out = []
    for rec in df[cols].head(MAX_EXAMPLES).to_dict("records"):
        out.append({k.removeprefix("op."): _plain(v) for k, v in rec.items() if not _isna(v)})
    return out


def _isna(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def _norm(df: pd.DataFrame, need: tuple[str, ...]) -> pd.DataFrame:
    for c in need:
        if c not in df.columns:
            df = df.assign(**{c: pd.Series(dtype="object")})
    return df


def check(history: pd.DataFrame, input: pd.DataFrame, output: pd.DataFrame,
          recovery: Recovery | None = None) -> dict:
    """Check one run. Returns ``{"verdict", "valid", "counts", "anomalies", "stats", "unknown_reasons",
    "bad_keys"}``; ``anomalies[name]`` holds up to 10 examples with provenance, ``counts`` exact totals.
    """
    recovery = recovery or Recovery()
    history = _norm(history, ("type", "f", "key", "seq"))
    input = _norm(input, ("key", "seq", "partition", "offset"))
    output = _norm(output, ("key", "seq", "partition", "offset"))
    prov = _prov_cols(output)
    counts: dict[str, int] = {}
    anomalies: dict[str, list] = {}

    inp = input.dropna(subset=["seq"]).astype({"seq": "int64"})
    inp = inp.assign(key=inp["key"].astype(str)).sort_values(["partition", "offset"], kind="stable")
    inp = inp.assign(rank=inp.groupby("key").cumcount())
    inp_u = inp.drop_duplicates(["key", "seq"])

    out = output.sort_values(["partition", "offset"], kind="stable")
    bad_value = out["seq"].isna()
    out_ok = out[~bad_value]
    out_ok = out_ok.assign(key=out_ok["key"].astype(str), seq=out_ok["seq"].astype("int64"))

    # duplicate
    dup_mask = out_ok.duplicated(["key", "seq"], keep=False)
    dups = out_ok[dup_mask]
    dup_pairs = dups.groupby(["key", "seq"], sort=False).size()
    counts["duplicate"] = int(len(dup_pairs))
    counts["duplicate-records"] = int(len(dups) - len(dup_pairs))
    ex = []
    for (k, s), grp in list(dups.groupby(["key", "seq"], sort=False))[:MAX_EXAMPLES]:
        ex.append({"key": k, "seq": int(s), "copies": _records(grp, ["partition", "offset", *prov])})
    anomalies["duplicate"] = ex

    first = out_ok.drop_duplicates(["key", "seq"], keep="first")
    m = inp_u[["key", "seq", "partition", "offset", "rank"]].merge(
        first[["key", "seq"]].assign(_seen=True), on=["key", "seq"], how="left")
    lost = m[m["_seen"].isna()]
    counts["lost"] = int(len(lost))
    anomalies["lost"] = [{"key": r["key"], "seq": int(r["seq"]), "input_partition": int(r["partition"]),
                          "input_offset": int(r["offset"])} for r in lost.head(MAX_EXAMPLES).to_dict("records")]

    # unexpected: not in input, or unparseable
    m2 = first.merge(inp_u[["key", "seq", "rank"]], on=["key", "seq"], how="left")
    unexp = m2[m2["rank"].isna()]
    counts["unexpected"] = int(len(unexp) + bad_value.sum())
    anomalies["unexpected"] = _records(unexp, ["key", "seq", "partition", "offset", *prov]) + \
        _records(out[bad_value], ["key", "partition", "offset", *prov])[: max(0, MAX_EXAMPLES - len(unexp))]

    # nonmonotonic: first occurrences, in output order, whose input rank goes backwards per key
    seen = m2.dropna(subset=["rank"])
    prev_rank = seen.groupby("key")["rank"].shift()
    back = seen[seen["rank"] < prev_rank]
    counts["nonmonotonic"] = int(len(back))
    if len(back):
        prev_seq = seen.groupby("key")["seq"].shift()
        back = back.assign(prev_seq=prev_seq[back.index].astype("int64"))
    anomalies["nonmonotonic"] = _records(back, ["key", "seq", "prev_seq", "partition", "offset", *prov]) \
        if len(back) else []

    # lost-write: acknowledged sends missing from the input log
    sends = history[(history["f"] == "send") & history["type"].isin(["ok", "fail", "info"])]
    ok = sends[sends["type"] == "ok"]
    if len(ok):
        okk = ok[["key", "seq"] + [c for c in ("partition", "offset") if c in ok.columns]]
        okk = okk.assign(key=okk["key"].astype(str), seq=okk["seq"].astype("int64"))
        m3 = okk.merge(inp_u[["key", "seq"]].assign(_in=True), on=["key", "seq"], how="left")
        lw = m3[m3["_in"].isna()]
    else:
        lw = pd.DataFrame(columns=["key", "seq"])
    counts["lost-write"] = int(len(lw))
    anomalies["lost-write"] = _records(lw, [c for c in ("key", "seq", "partition", "offset") if c in lw.columns])

    definite = any(counts[a] for a in DEFINITE)
    if definite:
        verdict = "invalid"
    elif not recovery.finished:
        verdict = "unknown"
    elif counts["lost"]:
        verdict = "invalid"
    else:
        verdict = "valid"

    bad_keys = _bad_keys(dups, lost, unexp, back, lw)
    stats = {
        "input_records": int(len(input)), "output_records": int(len(output)),
        "keys": int(inp["key"].nunique()),
        "sends_ok": int((sends["type"] == "ok").sum()), "sends_fail": int((sends["type"] == "fail").sum()),
        "sends_info": int((sends["type"] == "info").sum()),
    }
    return {"verdict": verdict, "valid": {"valid": True, "invalid": False}.get(verdict, "unknown"),
            "counts": counts, "anomalies": anomalies, "stats": stats,
            "unknown_reasons": list(recovery.reasons) if not recovery.finished else [],
            "bad_keys": bad_keys}


def _bad_keys(dups, lost, unexp, back, lw) -> dict[str, dict[str, int]]:
    """Per bad key, the count of each anomaly (the 50 worst keys by total)."""
    parts = []
    for name, df in (("duplicate", dups.drop_duplicates(["key", "seq"]) if len(dups) else dups),
                     ("lost", lost), ("unexpected", unexp), ("nonmonotonic", back), ("lost-write", lw)):
        if len(df):
            parts.append(df.groupby("key").size().rename(name))
    if not parts:
        return {}
    t = pd.concat(parts, axis=1).fillna(0).astype(int)
    t = t.loc[t.sum(axis=1).sort_values(ascending=False).index[:50]]
    return {str(k): {c: int(v) for c, v in row.items() if v} for k, row in t.iterrows()}
