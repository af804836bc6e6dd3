"""The exactly-once checker: every input record appears in the output exactly once, in order per key.

Pure: it takes frames and returns a dict; it never talks to Kafka (``harness/`` reads the topics).

Inputs (pandas DataFrames):

* ``history`` – workload ops with columns ``type`` (invoke/ok/fail/info), ``f``, ``key``, ``seq`` (and
  ``error`` for failed sends); may be empty (``onceproof check`` on a foreign pipeline has none).
* ``input`` – the input topic read at read_committed: ``key`` (str), ``seq`` (int), ``partition``,
  ``offset``.
* ``output`` – the output topic read at read_committed after recovery: ``key``, ``seq`` (Int64, NA when
  the value could not be parsed), ``partition``, ``offset`` and optional provenance columns named as
  in ``pipeline/provenance.py`` (``op.batch``, ``op.attempt``, ``op.input``, ...).

Accounting is per input record, i.e. per input (partition, offset): each is owed exactly once. An
output copy is paired with the input record it came from through its ``op.input`` header
(``"<input partition>:<input offset>"``, written by ``pipeline/transactional_sink.py``) when it has a
parsable one; copies without it are paired by (key, seq): per (key, seq), the input records that no
``op.input`` claimed are owed by the unpaired copies, so ``lost = max(0, unclaimed - copies)`` and the
extra copies are duplicates. With no ``op.input`` at all this is plain counting per (key, seq).

Anomalies (DESIGN §4; Jepsen's names where they fit):

* ``duplicate`` – a (key, seq) with more output copies than the input owes: an input record named by
  two or more copies' ``op.input``, or more unpaired copies than unclaimed input records (or, for a
  (key, seq) not in the input, a second copy). Counted as (key, seq) pairs; ``duplicate-records`` counts
  the extra copies. Each example lists every copy of the pair with its provenance (``input`` = its
  ``op.input``).
* ``lost`` – an input record with no output copy (by ``op.input``, or by count for unpaired copies).
  Counted as input records.
* ``lost-write`` – a send acknowledged ``ok`` in the history is absent from the input log.
* ``unexpected`` – an output (key, seq) not in the input log (counted per pair), an output value
  without key/seq, or a copy whose ``op.input`` names no input record or one holding a different (key,
  seq) (counted per copy; such a copy pays for no input record). Examples say ``why``.
* ``nonmonotonic`` – per key, the output's *first* occurrences go backwards relative to the input
  order (a re-emitted copy is a ``duplicate``, not also a reordering).
* ``input-duplicate`` – the same (key, seq) at two or more input offsets (counted as pairs;
  ``input-duplicate-records`` counts the extra input records). A fact about the input log, not the
  pipeline: the pipeline owes each copy once. Our workload sends each (key, seq) once through an
  idempotent producer, so with a workload history (any ``send`` op) it is a Kafka / client anomaly and
  definite; without one (``onceproof check`` on foreign topics, whose producers may legitimately resend)
  it is informational. Seen for real (at-least-once soak, seed 8: 1,182 pairs, each a run of 6 records
  written again 6 offsets later, one ``invoke`` and one ``ok`` each, at a ``kill-broker:leader``):
  librdkafka's idempotent producer can resend a possibly-persisted batch under a bumped epoch during a
  leader change, which the broker cannot deduplicate (confluentinc/librdkafka#4953, open). It is the
  input side's anomaly, named apart from the pipeline's ``duplicate``; the pipeline is still judged per
  input record.
* ``failed-write-visible`` – a send the history records as ``fail`` (definitely not written) whose
  (key, seq) is in the input log. Definite.

``info`` sends are neither required nor forbidden (Jepsen): only what reached the input log is owed.

Verdict: ``invalid`` if any definite anomaly (duplicate, unexpected, nonmonotonic, lost-write,
failed-write-visible, and input-duplicate when a workload history is present; the result's
``definite`` lists them) is found; otherwise ``unknown`` if recovery did not finish (``lost`` cannot be
told from "not yet"); otherwise ``invalid`` if anything is lost, else ``valid``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from checkers import examples

ANOMALIES = ("duplicate", "lost", "lost-write", "unexpected", "nonmonotonic", "input-duplicate",
             "failed-write-visible")
DEFINITE = ("duplicate", "unexpected", "nonmonotonic", "lost-write", "failed-write-visible")
DEFINITE_WITH_HISTORY = ("input-duplicate",)  # definite only when a workload history is present
MAX_EXAMPLES = 10
INPUT_REF = "op.input"  # pipeline/provenance.py INPUT


@dataclass
class Recovery:
    """Whether the pipeline caught up before the check: ``finished`` false → verdict at best unknown."""

    finished: bool = True
    reasons: list[str] = field(default_factory=list)


def _prov_cols(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith("op.")]


_records = examples.records


def _norm(df: pd.DataFrame, need: tuple[str, ...]) -> pd.DataFrame:
    for c in need:
        if c not in df.columns:
            df = df.assign(**{c: pd.Series(dtype="object")})
    return df


def check(history: pd.DataFrame, input: pd.DataFrame, output: pd.DataFrame,
          recovery: Recovery | None = None) -> dict:
    """Check one run. Returns ``{"verdict", "valid", "counts", "anomalies", "stats", "unknown_reasons",
    "bad_keys", "definite"}``; ``anomalies[name]`` holds up to 10 examples with provenance, ``counts``
    exact totals (module docstring for each name's unit), ``definite`` the anomaly names that make this
    run invalid by themselves. ``stats`` adds to the record counts ``output_with_input_ref`` (output
    rows with a parsable ``op.input``).

    How (for speed: O(n) numpy passes plus one int64 sort; no merges, no per-row Python; see
    bench/README.md): keys are factorised once to int codes shared by the three frames; each (key, seq)
    becomes a dense int id (per key, ``seq`` minus the key's smallest input seq, offset by the sizes of
    the keys before it; pairs outside the input's per-key range get extra ids by hashing), so the
    per-pair bookkeeping is ``bincount`` and table look-ups; the (partition, offset) order is an int64
    position per row; ``op.input`` is parsed by pyarrow's string kernels and looked up in a dense
    (partition, offset) → input row table; only the few example rows are turned back into Python
    objects.
    """
    recovery = recovery or Recovery()
    history = _norm(history, ("type", "f", "key", "seq"))
    input = _norm(input, ("key", "seq", "partition", "offset"))
    output = _norm(output, ("key", "seq", "partition", "offset"))
    prov = _prov_cols(output)
    counts: dict[str, int] = {}
    anomalies: dict[str, list] = {}

    # ---- input: rows with a seq, (key code, seq, position in (partition, offset) order)
    in_na = input["seq"].isna().to_numpy(dtype=bool)
    inp = input[~in_na] if in_na.any() else input
    seq_in = _int64(inp["seq"])
    pos_in = _positions(inp["partition"], inp["offset"])

    # ---- output: every row; ``ok`` = the value had a seq
    bad = output["seq"].isna().to_numpy(dtype=bool)
    ok = ~bad
    n_out = len(output)
    seq_out = np.zeros(n_out, np.int64)
    if bad.any():
        seq_out[ok] = _int64(output["seq"][ok])
    else:
        seq_out = _int64(output["seq"])
    pos_out = _positions(output["partition"], output["offset"])

    # ---- the hashing work (key strings of the three frames, history op types, op.input), in threads
    jobs = {"k_in": lambda: _factorize_str(inp["key"]), "k_out": lambda: _factorize_str(output["key"]),
            "k_h": lambda: _factorize_str(history["key"]), "type": lambda: pd.factorize(history["type"]),
            "send": lambda: (history["f"] == "send").to_numpy(dtype=bool)}
    if INPUT_REF in output.columns:
        jobs["ref"] = lambda: _input_refs(output[INPUT_REF], inp["partition"], inp["offset"])
    done = _run_all(jobs, threaded=len(inp) + len(output) + len(history) >= _THREADS_FROM)

    # ---- history: acknowledged (ok) and definitely failed (fail) sends
    sends_mask = done.pop("send")
    has_workload = bool(sends_mask.any())
    tcodes, tuniq = done.pop("type")
    tcodes = np.asarray(tcodes)
    tcount = {str(t): int(np.count_nonzero((tcodes == i) & sends_mask)) for i, t in enumerate(tuniq)
              if isinstance(t, str) and t in ("ok", "fail", "info")}
    tlist = list(tuniq)
    ok_code = tlist.index("ok") if "ok" in tcount else -2
    fail_code = tlist.index("fail") if tcount.get("fail") else -2
    if fail_code == -2:
        h_mask = sends_mask
        h_mask &= tcodes == ok_code
    else:
        h_mask = sends_mask & ((tcodes == ok_code) | (tcodes == fail_code))
    h_rows = None if h_mask.all() else np.flatnonzero(h_mask)  # history rows of the ok / fail sends
    del h_mask
    h_fail = None if fail_code == -2 else (tcodes == fail_code) if h_rows is None else (tcodes[h_rows] == fail_code)
    del tcodes
    h_seq = history["seq"] if h_rows is None else history["seq"].iloc[h_rows]
    seq_h = h_seq.astype("int64").to_numpy() if len(h_seq) else np.zeros(0, np.int64)
    del h_seq

    # ---- keys: one code space for the three frames (equal ``str(key)`` = equal code)
    (k_in, k_out, k_h), keys = _unify_codes([done.pop("k_in"), done.pop("k_out"), done.pop("k_h")])
    if h_rows is not None:
        k_h = k_h[h_rows]
    nk = len(keys)

    # ---- dense (key, seq) ids
    d_in, d_out, d_h, n_ids = _pair_ids(nk, (k_in, seq_in), (k_out, seq_out, ok), (k_h, seq_h))
    cnt_in = np.bincount(d_in, minlength=n_ids)
    cnt_out = np.bincount(d_out[ok] if bad.any() else d_out, minlength=n_ids)
    # a pair is seen at most a few times: small counters halve the tables' memory traffic
    cnt_in = cnt_in.astype(np.int32) if len(cnt_in) and cnt_in.max() < (1 << 31) else cnt_in
    cnt_out = cnt_out.astype(np.int32) if len(cnt_out) and cnt_out.max() < (1 << 31) else cnt_out
    multi_in = bool(len(d_in)) and cnt_in.max() > 1
    # first input occurrence of each pair: its position (a rank-equivalent within the key)
    if multi_in:
        first_in = np.full(n_ids, np.iinfo(np.int64).max)
        np.minimum.at(first_in, d_in, pos_in)
        in_first = first_in[d_in] == pos_in
    else:
        first_in = np.zeros(n_ids, np.int64)
        first_in[d_in] = pos_in
        in_first = None

    # ---- pairing: output copy → input record
    # ref[i]: the input row named by output row i's op.input, -1 when it names none, -2 without one
    ref = done.pop("ref", None)
    n_inr = len(d_in)
    if ref is None or not (ref >= -1).any():
        ref = None
        n_ref = 0
        free = ok                      # every copy is paired by (key, seq)
        mismatch = np.zeros(0, np.int64)
        per_rec = None
        n_free = cnt_out
        unclaimed = cnt_in
    else:
        has_ref = ref >= -1
        n_ref = int(np.count_nonzero(has_ref))
        free = ok & ~has_ref
        pr = np.flatnonzero(has_ref & ok)
        rr = ref[pr]
        same = rr >= 0
        same[same] = d_in[rr[same]] == d_out[pr[same]]
        mismatch = pr[~same]          # names no input record, or one holding another (key, seq)
        per_rec = np.bincount(rr[same], minlength=n_inr)  # copies per input record, by op.input
        del pr, rr, same, has_ref
        n_free = np.bincount(d_out[free], minlength=n_ids)
        unclaimed = np.bincount(d_in[per_rec == 0], minlength=n_ids)

    # ---- lost: input records no copy paid for
    if ref is None and not multi_in:
        lost_rows = np.flatnonzero(cnt_out[d_in] == 0)
    else:
        lost_rows = _lost_rows(d_in, pos_in, per_rec, unclaimed, n_free)
    counts["lost"] = int(len(lost_rows))
    lex = _earliest(lost_rows, pos_in)
    lp, lo_ = inp["partition"].iloc[lex].tolist(), inp["offset"].iloc[lex].tolist()
    anomalies["lost"] = [{"key": keys[k_in[r]], "seq": int(seq_in[r]), "input_partition": int(p),
                          "input_offset": int(o)} for r, p, o in zip(lex, lp, lo_)]

    # ---- first output occurrence of each pair (for unexpected, nonmonotonic and examples)
    multi_rows = np.flatnonzero((cnt_out[d_out] > 1) & ok)
    is_first = ok.copy()
    if len(multi_rows):
        first_out = np.full(n_ids, np.iinfo(np.int64).max)
        np.minimum.at(first_out, d_out[multi_rows], pos_out[multi_rows])
        is_first[multi_rows] = first_out[d_out[multi_rows]] == pos_out[multi_rows]
    in_input = cnt_in[d_out] > 0

    # ---- duplicate: per pair, copies beyond what the input owes
    if ref is None and not multi_in:
        dup_pair = cnt_out > 1
        extra = int(cnt_out[dup_pair].sum() - np.count_nonzero(dup_pair))
    else:
        owed = np.where(cnt_in > 0, unclaimed, 1)  # unpaired copies the pair can absorb
        excess = np.maximum(n_free.astype(np.int64) - owed, 0)
        absent = cnt_in == 0  # a pair not in the input: every copy after the first is a duplicate too
        excess[absent] = np.maximum(cnt_out[absent].astype(np.int64) - 1, 0)
        dup_pair = excess > 0
        extra = int(excess.sum())
        if per_rec is not None:
            twice = np.flatnonzero(per_rec > 1)
            dup_pair[d_in[twice]] = True
            extra += int((per_rec[twice] - 1).sum())
    counts["duplicate"] = int(np.count_nonzero(dup_pair))
    counts["duplicate-records"] = extra
    dup_rows = multi_rows[dup_pair[d_out[multi_rows]]]
    dup_first = dup_rows[is_first[dup_rows]]
    ex = []
    if len(dup_first):
        chosen = _earliest(dup_first, pos_out)  # first 10 pairs, in order of first appearance
        rows = dup_rows[np.isin(d_out[dup_rows], d_out[chosen])]
        rows = rows[np.argsort(pos_out[rows], kind="stable")]
        copies = output.iloc[rows]
        rd = d_out[rows]
        for r in chosen:
            grp = copies[rd == d_out[r]]
            ex.append({"key": keys[k_out[r]], "seq": int(seq_out[r]),
                       "copies": _records(grp, ["partition", "offset", *prov])})
    anomalies["duplicate"] = ex

    # ---- unexpected: pairs not in the input (first occurrences), unparseable values, and copies whose
    # op.input names no input record or another (key, seq) (when their own pair is in the input: else
    # the pair already counts)
    unexp_rows = np.flatnonzero(is_first & ~in_input)
    mis_rows = mismatch[in_input[mismatch]] if len(mismatch) else mismatch
    n_bad = int(bad.sum())
    counts["unexpected"] = int(len(unexp_rows) + len(mis_rows) + n_bad)
    uex = _earliest(unexp_rows, pos_out)
    ux = _records(_with_key_seq(output, uex, keys[k_out[uex]], seq_out[uex]).assign(why="not in the input"),
                  ["key", "seq", "partition", "offset", "why", *prov])
    if len(mis_rows) and len(ux) < MAX_EXAMPLES:
        mx = _earliest(mis_rows, pos_out, MAX_EXAMPLES - len(ux))
        named = ref[mx]
        why = [f"op.input names input {_named_desc(keys, k_in, seq_in, n)}" for n in named]
        ux += _records(_with_key_seq(output, mx, keys[k_out[mx]], seq_out[mx]).assign(why=why),
                       ["key", "seq", "partition", "offset", "why", *prov])
    if n_bad and len(ux) < MAX_EXAMPLES:
        bex = _earliest(np.flatnonzero(bad), pos_out, MAX_EXAMPLES - len(ux))
        ux += _records(output.iloc[bex].assign(why="value without key/seq"),
                       ["key", "partition", "offset", "why", *prov])
    anomalies["unexpected"] = ux

    # ---- nonmonotonic: per key, first occurrences in output order whose input position goes back
    seen = np.flatnonzero(is_first & in_input)
    del in_input
    rows, ks = _sort_by_key_then_pos(k_out, pos_out, seen)
    del seen
    if len(rows) > 1:
        back_m = ks[1:] == ks[:-1]
        del ks
        rk = first_in[d_out[rows]]
        back_m &= rk[1:] < rk[:-1]
        del rk
        back_rows, prev_rows = rows[1:][back_m], rows[:-1][back_m]
    else:
        back_rows = prev_rows = np.zeros(0, np.int64)
    counts["nonmonotonic"] = int(len(back_rows))
    if len(back_rows):
        o = np.argsort(pos_out[back_rows], kind="stable")[:MAX_EXAMPLES]
        bx = back_rows[o]
        back = _with_key_seq(output, bx, keys[k_out[bx]], seq_out[bx])
        back = back.assign(prev_seq=seq_out[prev_rows[o]].astype("int64"))
        anomalies["nonmonotonic"] = _records(back, ["key", "seq", "prev_seq", "partition", "offset", *prov])
    else:
        anomalies["nonmonotonic"] = []

    # ---- lost-write: acknowledged sends missing from the input log
    in_h = cnt_in[d_h] > 0
    lw_rows = np.flatnonzero(~in_h if h_fail is None else ~in_h & ~h_fail)
    counts["lost-write"] = int(len(lw_rows))
    lwx = lw_rows[:MAX_EXAMPLES]
    lw = history.iloc[lwx if h_rows is None else h_rows[lwx]]
    lw = lw[["key", "seq"] + [c for c in ("partition", "offset") if c in lw.columns]].assign(
        key=keys[k_h[lwx]], seq=seq_h[lwx])
    anomalies["lost-write"] = _records(lw, [c for c in ("key", "seq", "partition", "offset") if c in lw.columns])

    # ---- failed-write-visible: sends that definitely failed, yet their (key, seq) is in the input log
    fv_rows = np.zeros(0, np.int64) if h_fail is None else np.flatnonzero(in_h & h_fail)
    del in_h
    counts["failed-write-visible"] = int(len(fv_rows))
    anomalies["failed-write-visible"] = _with_input_places(
        fv_rows[:MAX_EXAMPLES], d_h, k_h, seq_h, keys, d_in, inp,
        history["error"].iloc[fv_rows[:MAX_EXAMPLES] if h_rows is None else h_rows[fv_rows[:MAX_EXAMPLES]]]
        if "error" in history.columns else None)

    # ---- input-duplicate: one (key, seq) at several input offsets
    if multi_in:
        idup_first = np.flatnonzero(in_first & (cnt_in[d_in] > 1))
        counts["input-duplicate"] = int(len(idup_first))
        counts["input-duplicate-records"] = int(np.count_nonzero(~in_first))
        anomalies["input-duplicate"] = _with_input_places(
            _earliest(idup_first, pos_in), d_in, k_in, seq_in, keys, d_in, inp, None, all_places=True)
    else:
        idup_first = np.zeros(0, np.int64)
        counts["input-duplicate"] = counts["input-duplicate-records"] = 0
        anomalies["input-duplicate"] = []

    definite = DEFINITE + (DEFINITE_WITH_HISTORY if has_workload else ())
    if any(counts[a] for a in definite):
        verdict = "invalid"
    elif not recovery.finished:
        verdict = "unknown"
    elif counts["lost"]:
        verdict = "invalid"
    else:
        verdict = "valid"

    per_key = {"duplicate": k_out[dup_first], "lost": k_in[lost_rows],
               "unexpected": np.concatenate([k_out[unexp_rows], k_out[mis_rows]]),
               "nonmonotonic": k_out[back_rows], "lost-write": k_h[lw_rows],
               "input-duplicate": k_in[idup_first], "failed-write-visible": k_h[fv_rows]}
    bad_keys = _bad_keys({name: _per_key(codes, keys) for name, codes in per_key.items() if len(codes)})
    stats = {
        "input_records": int(len(input)), "output_records": int(len(output)),
        "keys": int(np.count_nonzero(np.bincount(k_in, minlength=nk))),
        "sends_ok": tcount.get("ok", 0), "sends_fail": tcount.get("fail", 0),
        "sends_info": tcount.get("info", 0), "output_with_input_ref": n_ref,
    }
    return {"verdict": verdict, "valid": {"valid": True, "invalid": False}.get(verdict, "unknown"),
            "counts": counts, "anomalies": anomalies, "stats": stats,
            "unknown_reasons": list(recovery.reasons) if not recovery.finished else [],
            "bad_keys": bad_keys, "definite": list(definite)}


# ----------------------------------------------------------------------------------------------------
# pairing helpers

def _lost_rows(d_in: np.ndarray, pos_in: np.ndarray, per_rec: np.ndarray | None, unclaimed: np.ndarray,
               n_free: np.ndarray) -> np.ndarray:
    """Input rows no copy paid for: rows no ``op.input`` claimed (all rows when ``per_rec`` is None),
    minus, per pair, the first ``n_free`` of them in (partition, offset) order (paid by unpaired copies)."""
    rows = np.flatnonzero(per_rec == 0) if per_rec is not None else np.arange(len(d_in))
    d = d_in[rows]
    short = unclaimed[d] > n_free[d]  # this pair has fewer unpaired copies than unclaimed records
    rows, d = rows[short], d[short]
    if not len(rows):
        return rows
    nf = n_free[d]
    simple = nf == 0  # nothing to share out: every unclaimed record of the pair is lost
    if simple.all():
        return rows
    # pairs with some unpaired copies: the earliest unclaimed records are paid, the rest lost
    part, sd = rows[~simple], d[~simple]
    o = np.lexsort((pos_in[part], sd))
    part, sd = part[o], sd[o]
    start = np.r_[0, np.flatnonzero(sd[1:] != sd[:-1]) + 1]
    rank = np.arange(len(part)) - np.repeat(start, np.diff(np.r_[start, len(part)]))
    return np.sort(np.concatenate([rows[simple], part[rank >= n_free[sd]]]))


def _input_refs(ref: pd.Series, in_part: pd.Series, in_off: pd.Series) -> np.ndarray:
    """Per output row, the input row its ``op.input`` (``"<partition>:<offset>"``) names: its index in
    ``in_part`` / ``in_off``, -1 when no input row has that (partition, offset), -2 when the value is
    missing or not two non-negative integers joined by ``:``."""
    ok, p, o = _parse_refs(ref)
    if ok.all():
        return _lookup(_as_int(in_part), _as_int(in_off), p, o)
    out = np.full(len(ref), -2, np.int32 if len(in_part) < (1 << 31) else np.int64)
    if ok.any():
        out[ok] = _lookup(_as_int(in_part), _as_int(in_off), p[ok], o[ok])
    return out


def _parse_refs(s: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``"<p>:<o>"`` strings → (valid mask, p, o) as int64 arrays (0 where invalid), with pyarrow's
    string kernels (no per-row Python). Categoricals are parsed once per category."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(s)
    if isinstance(s.dtype, pd.CategoricalDtype):
        cok, cp, co = _parse_refs(pd.Series(np.asarray(s.cat.categories, dtype=object)))
        codes = s.cat.codes.to_numpy()
        has = codes >= 0
        c = np.where(has, codes, 0)
        return (has & cok[c]) if len(cok) else np.zeros(n, bool), cp[c] if len(cp) else np.zeros(n, np.int64), \
            co[c] if len(co) else np.zeros(n, np.int64)
    try:
        arr = pa.array(s, from_pandas=True, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # non-str objects: only the str values can be refs
        vals = s.to_numpy(dtype=object)
        is_str = np.fromiter((type(v) is str for v in vals), bool, len(vals))
        arr = pa.array(np.where(is_str, vals, None), type=pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    parts = pc.split_pattern(arr, ":", max_splits=1)
    two = pc.fill_null(pc.equal(pc.list_value_length(parts), 2), False).to_numpy(zero_copy_only=False)
    ok = np.zeros(n, bool)
    p = np.zeros(n, np.int64)
    o = np.zeros(n, np.int64)
    if not two.any():
        return ok, p, o
    # the pieces of the rows split in two, interleaved: p0, o0, p1, o1, ...
    flat = pc.list_flatten(parts if two.all() else pc.filter(parts, pa.array(two)))
    # non-empty, ASCII 0-9 only (Arrow's int cast would also take "0x.." hex), short enough for int64
    dec = pc.and_(pc.ascii_is_decimal(flat), pc.less_equal(pc.binary_length(flat), 18))
    dec_np = dec.to_numpy(zero_copy_only=False)
    if not dec_np.all():
        flat = pc.if_else(dec, flat, pa.scalar("0"))
    nums = pc.cast(flat, pa.int64()).to_numpy()
    if two.all() and dec_np.all():  # the usual case: every row is a ref
        return np.ones(n, bool), nums[0::2], nums[1::2]
    rows = np.flatnonzero(two)
    ok[rows] = dec_np[0::2] & dec_np[1::2]
    p[rows], o[rows] = nums[0::2], nums[1::2]
    return ok, p, o


def _as_int(s: pd.Series) -> np.ndarray:
    """An int64 column as a numpy array; NA or non-integers → -1 (never matched by a ref)."""
    x = _exact_int(s)
    if x is not None:
        return x
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    good = np.isfinite(v) & (v == np.round(v))
    return np.where(good, v, -1).astype(np.int64)


def _lookup(in_p: np.ndarray, in_o: np.ndarray, q_p: np.ndarray, q_o: np.ndarray) -> np.ndarray:
    """Row of (``in_p``, ``in_o``) holding each (``q_p``, ``q_o``), -1 when none (the last row of a
    repeated place). A dense table per (partition, offset range) when the offsets are dense (a topic's
    offsets are, up to transaction markers), else hashing. Few, reused temporaries: at 10M rows every
    fresh array costs page faults."""
    n = len(in_p)
    if n == 0:
        return np.full(len(q_p), -1, np.int64)
    row_t = np.int32 if n < (1 << 31) else np.int64
    valid = in_p >= 0
    pmin, pmax = int(in_p[valid].min(initial=0)), int(in_p[valid].max(initial=-1))
    if pmax >= pmin and pmax - pmin < (1 << 20) and valid.all():
        pc_ = in_p - pmin
        npart = pmax - pmin + 1
        omin, omax, used = _offset_span(pc_, in_o, npart)
        width = np.where(used, omax - omin + 1, 0)
        total = int(width.sum())
        if total <= 4 * n + 1024:
            base = np.zeros(npart, np.int64)  # table index of (p, o) = base[p] + o
            base[1:] = np.cumsum(width[:-1])
            base -= np.where(used, omin, 0)
            table = np.full(total, -1, row_t)
            idx = base[pc_]
            idx += in_o
            table[idx] = np.arange(n, dtype=row_t)
            del idx, pc_
            qc = q_p - pmin
            inr = None
            if len(qc) and not (qc.min() >= 0 and qc.max() < npart):
                inr = (qc >= 0) & (qc < npart)
                qc[~inr] = 0
            ok = np.greater_equal(q_o, omin[qc])
            ok &= np.less_equal(q_o, omax[qc])
            if inr is not None:
                ok &= inr
            qi = base[qc]
            del qc
            qi += q_o
            every = bool(ok.all())
            if not every:
                qi[~ok] = 0
            out = table[qi]
            if not every:
                out[~ok] = -1
            return out
    # sparse offsets: hash the (partition, offset) pairs of both sides together
    pc_all, _ = pd.factorize(np.concatenate([in_p, q_p]))
    ids, n_u = _hash_pairs(pc_all, np.concatenate([in_o, q_o]))
    table = np.full(n_u, -1, np.int64)
    table[ids[:n][valid]] = np.flatnonzero(valid)
    return table[ids[n:]]


def _named_desc(keys: np.ndarray, k_in: np.ndarray, seq_in: np.ndarray, row: int) -> str:
    return "(no such input record)" if row < 0 else f"holding ({keys[k_in[row]]}, {int(seq_in[row])})"


def _with_input_places(rows: np.ndarray, d_rows: np.ndarray, k_rows: np.ndarray, seq_rows: np.ndarray,
                       keys: np.ndarray, d_in: np.ndarray, inp: pd.DataFrame, errors: pd.Series | None,
                       all_places: bool = False) -> list[dict]:
    """Examples for ``rows`` (of a frame whose pair ids are ``d_rows``, key codes ``k_rows`` into ``keys``
    and seqs ``seq_rows``): key, seq, the input place of the
    pair (``input_partition`` / ``input_offset``: its last occurrence, so ``nearby`` times the newest
    copy), ``inputs`` (every input place) when ``all_places``, and ``error`` when given. Only the example
    pairs are looked up (one ``isin`` pass)."""
    if not len(rows):
        return []
    want = d_rows[rows]
    hit = np.flatnonzero(np.isin(d_in, want))
    hp, ho = inp["partition"].iloc[hit].to_numpy(), inp["offset"].iloc[hit].to_numpy()
    places: dict[int, list[tuple[int, int]]] = {}
    for d, p, o in zip(d_in[hit].tolist(), hp.tolist(), ho.tolist()):
        places.setdefault(d, []).append((int(p), int(o)))
    errs = errors.tolist() if errors is not None else [None] * len(rows)
    out = []
    for r, d, e in zip(rows.tolist(), want.tolist(), errs):
        pl = sorted(places.get(d, []))
        ex = {"key": keys[k_rows[r]], "seq": int(seq_rows[r])}
        if pl:
            ex["input_partition"], ex["input_offset"] = pl[-1]
        if all_places:
            ex["inputs"] = [{"partition": p, "offset": o} for p, o in pl]
        if e is not None and not examples.isna(e):
            ex["error"] = e
        out.append(ex)
    return out


# ----------------------------------------------------------------------------------------------------
# vectorised helpers

_THREADS_FROM = 1_000_000  # rows; below, threads cost more than they save
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


def _int64(s: pd.Series) -> np.ndarray:
    """``s.astype("int64")`` as a numpy array (no NA left in ``s``)."""
    if s.dtype == np.int64:
        return s.to_numpy()
    return s.astype("int64").to_numpy()


def _exact_int(s: pd.Series) -> np.ndarray | None:
    """``s`` as int64 when it is an integer column without NA, else None (no conversion guessing)."""
    if pd.api.types.is_integer_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        if isinstance(s.dtype, np.dtype):
            return s.to_numpy(dtype=np.int64)
        if not s.isna().any():
            return s.to_numpy(dtype=np.int64)
    return None


def _offset_span(pc: np.ndarray, off: np.ndarray, npart: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per partition code ``0..npart-1``: smallest and largest offset, and whether it has any row."""
    omin = np.full(npart, _I64_MAX)
    omax = np.full(npart, _I64_MIN)
    np.minimum.at(omin, pc, off)
    np.maximum.at(omax, pc, off)
    return omin, omax, omax >= omin


def _positions(part: pd.Series, off: pd.Series) -> np.ndarray:
    """Per row an int64 ``(place << b) | row`` whose order is the stable ``(partition, offset)`` sort:
    unique, and the row index is its low ``b`` bits (``b`` = bits of ``len - 1``)."""
    n = len(part)
    if n == 0:
        return np.zeros(0, np.int64)
    b = max(1, (n - 1).bit_length())
    idx = np.arange(n, dtype=np.int64)
    p, o = _exact_int(part), _exact_int(off)
    place = None
    if p is not None and o is not None:
        pmin, pmax = int(p.min()), int(p.max())
        if pmax - pmin < (1 << 20):
            pc = p - pmin
            del p
            npart = pmax - pmin + 1
            omin, omax, used = _offset_span(pc, o, npart)
            width = [int(hi) - int(lo) + 1 if u else 0 for lo, hi, u in zip(omin, omax, used)]
            if sum(width) < (1 << (62 - b)):  # place fits beside the row bits
                start = np.zeros(npart, np.int64)
                start[1:] = np.cumsum(width[:-1], dtype=np.int64)
                start -= np.where(used, omin, 0)  # place = start[p] + (o - omin[p])
                place = start[pc]
                place += o
    if place is None:
        order = pd.DataFrame({"p": part.reset_index(drop=True), "o": off.reset_index(drop=True)}).sort_values(
            ["p", "o"], kind="stable").index.to_numpy()
        place = np.empty(n, np.int64)
        place[order] = idx
    place <<= b
    place |= idx
    return place


def _earliest(rows: np.ndarray, pos: np.ndarray, k: int = MAX_EXAMPLES) -> np.ndarray:
    """The ``k`` rows (of ``rows``) first in (partition, offset) order, in that order."""
    if len(rows) > k:
        rows = rows[np.argpartition(pos[rows], k - 1)[:k]]
    return rows[np.argsort(pos[rows], kind="stable")]


def _sort_by_key_then_pos(codes: np.ndarray, pos: np.ndarray, rows: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` sorted by (key code, position), and their key codes: one int64 sort of
    ``code << bits | pos`` when it fits."""
    if len(rows) == 0:
        return rows, codes[rows]
    pos_r = pos[rows]
    b = max(1, (len(pos) - 1).bit_length())  # the row bits of a position
    pbits = max(b, int(pos_r.max()).bit_length())
    kbits = int(codes.max()).bit_length() if len(codes) else 0
    if kbits + pbits <= 63:
        packed = codes[rows].astype(np.int64)
        packed <<= pbits
        packed |= pos_r
        del pos_r
        packed.sort()
        ks = packed >> pbits
        packed &= (1 << b) - 1  # low bits of the position: the row
        return packed, ks
    rows = rows[np.lexsort((pos_r, codes[rows]))]
    return rows, codes[rows]


def _run_all(jobs: dict, threaded: bool) -> dict:
    """``{name: job()}``; in threads when ``threaded``: pandas hashes without the GIL, so on a
    multi-core machine the factorisations overlap (~1.8x on 2 cores at 10M rows each). The results
    do not depend on the threads."""
    if not threaded:
        return {k: f() for k, f in jobs.items()}
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as ex:
        futs = {k: ex.submit(f) for k, f in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


def _unify_codes(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-column ``(codes, strs)`` (from ``_factorize_str``) → codes in one code space, and the str
    of each code."""
    allstr = np.concatenate([u for _, u in parts]) if parts else np.zeros(0, object)
    g, keys = pd.factorize(allstr)
    out, at = [], 0
    for codes, u in parts:
        m = np.asarray(g[at:at + len(u)], dtype=np.int32 if len(keys) < (1 << 31) else np.int64)
        at += len(u)
        out.append(m[codes] if len(codes) else np.zeros(0, np.int64))
    return out, np.asarray(keys, dtype=object)


def _factorize_str(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, str of each unique) such that ``uniques[codes] == s.astype(str)`` element-wise."""
    if len(s) == 0:
        return np.zeros(0, np.int64), np.zeros(0, object)
    vals = s
    if isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "python":
        vals = getattr(s.array, "_ndarray", s)  # the object array behind it (factorize is 2x faster)
    elif s.dtype == object:
        vals = s.to_numpy()
    codes, uniq = pd.factorize(vals)
    codes = np.asarray(codes, dtype=np.int64)
    if s.dtype == object or vals is not s:
        # hashing would merge 1, 1.0 and True; str() does not: only use the codes when all are str
        if not all(type(u) is str for u in uniq):
            return _factorize_plain_str(s)
        strs = np.asarray(uniq, dtype=object)
    else:
        strs = pd.Series(uniq, dtype=s.dtype).astype(str).to_numpy(dtype=object)
        if len(set(strs.tolist())) != len(strs):  # e.g. floats printing alike: stay exact
            return _factorize_plain_str(s)
    if (codes < 0).any():  # NA: its str() the way astype(str) prints it
        if s.dtype == object:  # None and NaN print differently
            return _factorize_plain_str(s)
        na_at = int(np.flatnonzero(codes < 0)[0])
        na_str = s.iloc[[na_at]].astype(str).iloc[0]
        strs = np.append(strs, np.array([na_str], dtype=object))
        codes = np.where(codes < 0, len(strs) - 1, codes)
    return codes, strs


def _factorize_plain_str(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    codes, uniq = pd.factorize(s.astype(str).to_numpy(dtype=object))
    return np.asarray(codes, dtype=np.int64), np.asarray(uniq, dtype=object)


def _pair_ids(nk: int, inp, out, hist) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Dense ids of (key code, seq) pairs for input, output and history rows (equal pair = equal id).

    A pair inside its key's input seq range gets ``cum[key] + seq - lo[key]`` (no hashing; ``cum`` =
    the summed seq ranges of the keys before it); the others
    (unexpected seqs, unknown keys; or all pairs when the input's seqs are too sparse for a table) get
    ids after those by hashing. ``out`` carries a mask of its rows with a seq (the rest get id 0).
    """
    k_in, s_in = inp
    k_out, s_out, ok = out
    k_h, s_h = hist
    lo = np.full(nk, _I64_MAX)
    hi = np.full(nk, _I64_MIN)
    np.minimum.at(lo, k_in, s_in)
    np.maximum.at(hi, k_in, s_in)
    present = hi >= lo
    widths = [int(h) - int(l) + 1 if p else 0 for l, h, p in zip(lo.tolist(), hi.tolist(), present.tolist())]
    n_dense = sum(widths)
    if n_dense > 2 * len(s_in) + 1024:  # sparse seqs: hash everything
        n_dense = 0
        widths = [0] * nk
    cum = np.zeros(nk, np.int64)
    if nk:
        cum[1:] = np.cumsum(widths[:-1], dtype=np.int64)
    width = np.asarray(widths, dtype=np.uint64) if n_dense else np.zeros(nk, np.uint64)
    lo[~present | (n_dense == 0)] = 0
    n_rows = len(k_in) + len(k_out) + len(k_h)
    id_type = np.int32 if n_dense + n_rows < (1 << 31) else np.int64

    def dense(k, s, m=None):
        """id = cum[k] + (seq - lo[k]) when 0 <= seq - lo[k] < width[k] (as unsigned: one compare)."""
        rel = s - lo[k]
        inr = rel.view(np.uint64) < width[k]
        if m is not None:
            inr &= m
        rel += cum[k]
        d = rel.astype(id_type, copy=False)
        if not inr.all():
            d[~inr] = 0
        return d, inr

    d_in, r_in = dense(k_in, s_in)
    d_out, r_out = dense(k_out, s_out, ok)
    d_h, r_h = dense(k_h, s_h)
    rest = [np.flatnonzero(~r_in), np.flatnonzero(~r_out & ok), np.flatnonzero(~r_h)]
    del r_in, r_out, r_h
    n_ids = n_dense
    if any(len(r) for r in rest):
        kk = np.concatenate([k_in[rest[0]], k_out[rest[1]], k_h[rest[2]]])
        ss = np.concatenate([s_in[rest[0]], s_out[rest[1]], s_h[rest[2]]])
        ids, n_extra = _hash_pairs(kk, ss)
        ids += n_dense
        a, b = len(rest[0]), len(rest[0]) + len(rest[1])
        d_in[rest[0]], d_out[rest[1]], d_h[rest[2]] = ids[:a], ids[a:b], ids[b:]
        n_ids += n_extra
    return d_in, d_out, d_h, max(n_ids, 1)  # >= 1: rows without a seq look up id 0 (and are masked)


def _hash_pairs(k: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, int]:
    sc, su = pd.factorize(s)
    comp = np.asarray(k, np.int64) * max(1, len(su)) + np.asarray(sc, np.int64)
    ids, u = pd.factorize(comp)
    return np.asarray(ids, np.int64), len(u)


def _with_key_seq(df: pd.DataFrame, rows: np.ndarray, keys: np.ndarray, seqs: np.ndarray) -> pd.DataFrame:
    """Rows of ``df`` with ``key`` as str and ``seq`` as int64, as the examples show them."""
    return df.iloc[rows].assign(key=keys, seq=np.asarray(seqs, dtype=np.int64))


def _per_key(codes: np.ndarray, keys: np.ndarray) -> pd.Series:
    """What ``frame.groupby("key").size()`` gives for a frame whose keys are ``keys[codes]``."""
    c = np.bincount(codes, minlength=len(keys))
    nz = np.flatnonzero(c)
    return pd.Series(c[nz], index=pd.Index(keys[nz], dtype=object, name="key")).sort_index()


def _bad_keys(per_key: dict[str, pd.Series]) -> dict[str, dict[str, int]]:
    """Per bad key, the count of each anomaly (the 50 worst keys by total)."""
    parts = [per_key[name].rename(name) for name in ANOMALY_ORDER if name in per_key]
    if not parts:
        return {}
    t = pd.concat(parts, axis=1).fillna(0).astype(int)
    t = t.loc[t.sum(axis=1).sort_values(ascending=False).index[:50]]
    return {str(k): {c: int(v) for c, v in row.items() if v} for k, row in t.iterrows()}


ANOMALY_ORDER = ("duplicate", "lost", "unexpected", "nonmonotonic", "lost-write", "input-duplicate",
                 "failed-write-visible")
