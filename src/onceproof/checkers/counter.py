"""The counter checker: a stateful pipeline's running aggregates are those of input prefixes.

Pure: it takes frames and returns a dict; it never talks to Kafka (``harness/`` reads the topics).

The workload: input records keyed by ``key`` with value ``{"key", "seq"}``, ``seq`` = 0, 1, 2, ... per
key, each key in one input partition. The pipeline groups by key and keeps ``count`` (records
applied), ``sum`` (of their ``seq``) and ``max_seq`` in Spark state, emitting in update mode (one
output row per key updated in a micro-batch) ``{"key", "count", "sum", "max_seq"}`` to a keyed output
topic, so one key's aggregates lie in one output partition, in emission order.

The check follows Kafka Streams' ``EosTestDriver`` (apache/kafka,
``streams/src/test/java/org/apache/kafka/streams/tests/EosTestDriver.java``, ``verifyMin`` /
``verifySum`` / ``verifyMax`` / ``verifyCnt``): each output value is compared with a running aggregate
of the key's input in input order. That driver checks lockstep (one output per input record, caching
off); Spark emits once per key per micro-batch, so here an output aggregate must be the aggregate of
*some* prefix of its key's input, the prefixes must not go back, and the last one must be the whole
input (docs/research/issue9/state-and-eos-test-driver.md §A.3-A.4).

Definitions: a key's input records in input order are ordered by input (partition, offset); prefix
``p`` (1 <= p <= n, n = the key's input records) is its first ``p`` records, with the true aggregate
``(p, S(p), M(p))`` (count, sum of seq, max seq). An output row *matches* prefix ``p`` when its
``(count, sum, max_seq)`` equals ``(p, S(p), M(p))``; as ``count`` fixes ``p``, the prefix a row is
compared with is ``p = count``.

Anomalies (one label per output row, except ``state-final-mismatch``, per key):

* ``state-double-count`` – an aggregate that proves some record was applied twice (a replayed batch
  applied on top of state that already held it): ``count`` above the key's input count; or, for
  ``count = c <= n``, ``sum < S(c)`` or ``max_seq < M(c)`` or (``max_seq = M(c)`` and
  ``sum != S(c)``). Why a proof: when a key's input seqs strictly increase (the workload's 0, 1, 2,
  ...), ``c`` distinct input records have sum >= S(c) and max >= M(c), and the only ``c`` distinct
  ones with max M(c) are prefix ``c``. Note the direction: a replay applied twice makes ``sum`` *lower*
  than prefix ``count``'s sum (the doubled seqs are earlier, smaller ones than the prefix's last).
  Counted per output row.
* ``state-missed`` – an aggregate that matches no prefix and is not a double count: ``count = c <= n``,
  ``max_seq > M(c)`` and ``sum >= S(c)``: ``c`` records up to ``max_seq`` where prefix ``c`` ends
  earlier, i.e. a record before ``max_seq`` was skipped (possibly besides a doubled one: count, sum and
  max cannot tell a skip alone from a skip plus a doubling). Counted per output row.
* ``state-regression`` – a row that matches a prefix shorter than one its key already showed (among
  matching rows, in output order per key): the state went back. Counted per output row that regresses.
* ``unexpected`` – an output row without a parsable ``key`` / ``count`` / ``sum`` / ``max_seq``, with a
  key not in the input, with ``count < 1``, or with ``max_seq`` outside the key's input seqs (the state
  holds a record the input does not). Counted per output row; examples say ``why``.
* ``state-final-mismatch`` – a key with input whose last output aggregate (output order) is not the
  aggregate of its whole input, or which has no output at all (``why`` says which). Counted per key.
  The counter's analogue of ``lost``: what the job consumed but its output never showed.
* ``duplicate`` – a matching row whose prefix equals the longest its key already showed: the same
  aggregate emitted again. The state is right (prefixes only have to be non-decreasing), but without a
  watermark Spark's update mode emits a key at most once per micro-batch, and each emission of a key
  holds at least one more record than the last, so a repeat means a batch's output was written twice
  (a replayed batch through a sink without a replay marker: the at-least-once sink after a driver kill
  in the commit window). Definite. Counted per output row.

Precondition for the proofs above: each key's input seqs strictly increase in input order and each
key lives in one input partition; ``stats`` counts keys that break it (``irregular_keys``,
``split_keys``); on those keys the labels are a best guess. Input rows without a key or seq are left
out of the prefixes (``stats.input_unparsable``).

Verdict (as in ``checkers/exactly_once.py``, with ``state-final-mismatch`` in the role of ``lost``):
``invalid`` if any definite anomaly (double-count, missed, regression, unexpected, duplicate; the result's
``definite`` lists them) is found; otherwise ``unknown`` if recovery did not finish (a short last
aggregate cannot be told from "not yet"); otherwise ``invalid`` if any ``state-final-mismatch``, else
``valid``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from onceproof.checkers import examples
from onceproof.checkers.exactly_once import Recovery

DOUBLE = "state-double-count"
MISSED = "state-missed"
REGRESSION = "state-regression"
FINAL = "state-final-mismatch"
UNEXPECTED = "unexpected"
REPEAT = "duplicate"
ANOMALIES = (DOUBLE, MISSED, REGRESSION, UNEXPECTED, FINAL, REPEAT)
DEFINITE = (DOUBLE, MISSED, REGRESSION, UNEXPECTED, REPEAT)
MAX_EXAMPLES = 10
FIELDS = ("count", "sum", "max_seq")

__all__ = ["ANOMALIES", "DEFINITE", "Recovery", "check", "decode"]


def check(history: pd.DataFrame, input: pd.DataFrame, output: pd.DataFrame,
          recovery: Recovery | None = None) -> dict:
    """Check one counter run. Returns ``{"verdict", "valid", "counts", "anomalies", "stats",
    "unknown_reasons", "bad_keys", "definite"}`` like ``exactly_once.check``.

    Inputs (pandas DataFrames):

    * ``history`` – the workload's ops; accepted for the checkers' common signature and not used (the
      send-level checks, ``lost-write`` etc., belong to ``exactly_once`` on the input topic).
    * ``input`` – the input topic at read_committed, cut at what the job consumed: ``key`` (str),
      ``seq`` (int; NA rows are left out), ``partition``, ``offset``.
    * ``output`` – the output topic at read_committed after recovery, e.g. from :func:`decode`:
      ``key``, ``count``, ``sum``, ``max_seq`` (int, NA when unparsable), ``partition``, ``offset``
      and optional provenance columns ``op.*`` (``op.batch``, ...), shown in examples without ``op.``.

    Units: ``counts[name]`` is exact, per output row for every anomaly but ``state-final-mismatch``
    (per key); ``anomalies[name]`` holds up to 10 examples, the first in output (partition, offset)
    order (``state-final-mismatch``: in input order of the keys). Row examples give ``key``, the
    aggregate (``count``, ``sum``, ``max_seq``), the output ``partition`` / ``offset``, the provenance
    columns, and: ``prefix`` (the true aggregate of the nearest prefix, of length ``min(count, n)``) and
    ``input_count`` (n) for double-count / missed; ``after`` (the longest prefix shown before it: count,
    partition, offset, provenance) for regression and repeat; ``why`` for unexpected. Key examples give
    ``key``, ``input_count``, ``expected`` (the whole input's aggregate), ``why`` and ``last`` (the last
    output row, when there is one). ``bad_keys``: per key (the 50 worst), its count of each anomaly.

    How: prefix aggregates come from one sort of the input by (key, partition, offset) and per-key
    ``cumsum`` / ``cummax``, laid out flat so that prefix ``p`` of key ``k`` sits at ``start[k] + p -
    1``; each output row is then a table look-up at ``(key, count)``; regression is a per-key running
    max over the matching rows sorted by (key, partition, offset). No per-row Python except for the
    examples.
    """
    w = _Work(input=_norm(input, ("key", "seq", "partition", "offset")),
              output=_norm(output, ("key", *FIELDS, "partition", "offset")))
    _prefix_tables(w)
    _output_rows(w)
    _prefix_lookup(w)
    _regressions(w)
    _final(w)
    return _result(w, recovery or Recovery())


class _Work:
    """What one :func:`check` passes from step to step. The input's prefix tables (``keys``, ``n``
    records per key, ``start``/``end`` rows, ``S``/``M`` prefix sums and maxima, ``lo`` smallest seq);
    the output's parsed columns (``c``, ``s``, ``m``, key codes ``kc``, ``op_``/``oo`` place, ``pos``
    rank, ``why`` unexpected reason); then each anomaly's rows."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _prefix_tables(w: _Work) -> None:
    """The input's prefix aggregates per key, laid out flat so prefix ``p`` of key ``k`` sits at
    ``start[k] + p - 1`` (``S``: sum, ``M``: max), from one sort by (key, partition, offset)."""
    input = w.input
    seq_all, seq_ok = _ints(input["seq"])
    w.in_ok = in_ok = seq_ok & input["key"].notna().to_numpy(dtype=bool)
    inp = input[in_ok] if not in_ok.all() else input
    seq_in = seq_all[in_ok]
    ip, _ = _ints(inp["partition"])
    io, _ = _ints(inp["offset"])
    by_place = np.lexsort((io, ip))                      # input order
    kc_place, w.keys = pd.factorize(_str_keys(inp["key"]).to_numpy()[by_place])  # codes in input order
    kc_in = np.empty(len(inp), np.int64)
    kc_in[by_place] = kc_place
    w.nk = nk = len(w.keys)
    order = np.lexsort((io, ip, kc_in))                  # by key, then input order
    ks, ss = kc_in[order], seq_in[order]
    w.n = n = np.bincount(ks, minlength=nk).astype(np.int64)  # input records per key
    w.start = np.cumsum(n) - n                           # a key's first row in ``order``
    grp = pd.Series(ss).groupby(ks, sort=False)
    w.S = grp.cumsum().to_numpy(np.int64)                # S[start[k] + p - 1] = sum of prefix p
    w.M = grp.cummax().to_numpy(np.int64)                # M[...] = max of prefix p
    same = ks[1:] == ks[:-1]
    w.irregular = np.unique(ks[1:][same & (ss[1:] <= ss[:-1])])
    w.split = np.unique(ks[1:][same & (ip[order][1:] != ip[order][:-1])])
    w.lo = np.full(nk, np.iinfo(np.int64).max)
    np.minimum.at(w.lo, ks, ss)                          # the key's smallest input seq
    w.end = w.start + n - 1                              # row of the whole input's aggregate


def _output_rows(w: _Work) -> None:
    """Parse the output's aggregates, map keys to the input's codes, rank rows in output order, and name
    each unexpected row's reason (``why``; ``unexp``: their rows). ``rng``: rows left to compare with a
    prefix, ``k0`` their key codes (0 elsewhere), ``nn`` their key's input count."""
    output, nk = w.output, w.nk
    w.n_out = n_out = len(output)
    c, c_ok = _ints(output["count"])
    s, s_ok = _ints(output["sum"])
    m, m_ok = _ints(output["max_seq"])
    w.c, w.s, w.m, w.fields_ok = c, s, m, c_ok & s_ok & m_ok
    okey = output["key"]
    has_key = okey.notna().to_numpy(dtype=bool)
    kc = np.full(n_out, -1, np.int64)
    if has_key.any():
        kc[has_key] = pd.Index(w.keys).get_indexer(_str_keys(okey[has_key]).to_numpy())
    w.kc = kc
    w.op_, _ = _ints(output["partition"])
    w.oo, _ = _ints(output["offset"])
    w.pos = np.empty(n_out, np.int64)                    # rank in output (partition, offset) order
    w.pos[np.lexsort((w.oo, w.op_))] = np.arange(n_out)

    why = np.full(n_out, None, dtype=object)             # unexpected: the reason, else None
    parsed = has_key & c_ok & s_ok & m_ok
    why[~parsed] = "value without key/count/sum/max_seq"
    known = parsed & (kc >= 0)
    why[parsed & (kc < 0)] = "key not in the input"
    w.k0 = k0 = np.where(known, kc, 0)
    w.nn = w.n[k0] if nk else np.zeros(n_out, np.int64)
    low = known & (c < 1)
    why[low] = "count below 1"
    rng = known & ~low
    outside = rng & ((m < w.lo[k0]) | (m > w.M[w.end[k0]])) if nk else rng
    why[outside] = "max_seq outside the key's input seqs"
    rng &= ~outside
    w.rng, w.why = rng, why
    w.unexp = np.flatnonzero(pd.notna(why))


def _prefix_lookup(w: _Work) -> None:
    """Each comparable row against the true prefix at (key, count): ``match``, or double-count / missed
    (``p_near``: the nearest prefix length; ``over``: count above the key's input)."""
    rng, c, nn, n_out = w.rng, w.c, w.nn, w.n_out
    w.p_near = np.where(rng, np.minimum(np.maximum(c, 1), nn), 1)  # nearest prefix length
    idx = np.where(rng, w.start[w.k0] + w.p_near - 1, 0) if w.nk else np.zeros(n_out, np.int64)
    es, em = (w.S[idx], w.M[idx]) if w.nk else (np.zeros(n_out, np.int64),) * 2
    w.over = over = rng & (c > nn)
    inr = rng & ~over
    w.match = match = inr & (w.s == es) & (w.m == em)
    dbl = over | (inr & ~match & ((w.s < es) | (w.m <= em)))
    miss = inr & ~match & ~dbl
    w.dbl_rows, w.miss_rows = np.flatnonzero(dbl), np.flatnonzero(miss)


def _regressions(w: _Work) -> None:
    """Regression / repeat among matching rows, in output order per key: a count below (or equal to) the
    longest prefix already shown (``prev``)."""
    kc, oo, op_ = w.kc, w.oo, w.op_
    mr = np.flatnonzero(w.match)
    mr = mr[np.lexsort((oo[mr], op_[mr], kc[mr]))]
    mk, mp = kc[mr], w.c[mr]
    if len(mr):
        # per-key running max in one pass: keys ascend, so key * (P + 1) + p never mixes keys
        big = int(mp.max()) + 1
        run = np.maximum.accumulate(mk * big + mp) - mk * big
        first = np.r_[True, mk[1:] != mk[:-1]]
        prev = np.r_[0, run[:-1]]
        prev[first] = 0
    else:
        prev = mp
    back = mp < prev
    rep = (mp == prev) & (prev > 0)
    w.mr, w.reg_rows, w.rep_rows = mr, mr[back], mr[rep]
    w.prev_back, w.prev_rep = prev[back], prev[rep]


def _final(w: _Work) -> None:
    """Each input key's last output row (output order) must be the whole input's aggregate
    (``final_keys``: the keys whose is not; ``last_of``: each key's last row, -1 for none)."""
    kc, nk = w.kc, w.nk
    kr = np.flatnonzero(kc >= 0)
    kr = kr[np.lexsort((w.oo[kr], w.op_[kr], kc[kr]))]
    w.last_of = last_of = np.full(nk, -1, np.int64)
    if len(kr):
        tail = np.r_[kc[kr][1:] != kc[kr][:-1], True]
        last_of[kc[kr][tail]] = kr[tail]
    lr = np.maximum(last_of, 0)
    whole = (last_of >= 0) & w.match[lr] & (w.c[lr] == w.n) if w.n_out else np.zeros(nk, bool)
    w.final_keys = np.flatnonzero(~whole)


def _result(w: _Work, recovery: Recovery) -> dict:
    """Counts, examples (:class:`_Ctx`), the verdict, the bad keys and the stats, as :func:`check`
    returns them."""
    kc, output = w.kc, w.output
    counts = {DOUBLE: len(w.dbl_rows), MISSED: len(w.miss_rows), REGRESSION: len(w.reg_rows),
              UNEXPECTED: len(w.unexp), FINAL: len(w.final_keys), REPEAT: len(w.rep_rows)}
    ctx = _Ctx(output, [c for c in output.columns if c.startswith("op.")], w.keys, kc, w.c, w.s, w.m,
               w.fields_ok, w.pos, w.n, w.S, w.M, w.start, w.end)
    anomalies = {DOUBLE: ctx.prefix_examples(w.dbl_rows, w.p_near, w.over),
                 MISSED: ctx.prefix_examples(w.miss_rows, w.p_near, w.over),
                 REGRESSION: ctx.after_examples(w.reg_rows, w.mr, w.prev_back),
                 REPEAT: ctx.after_examples(w.rep_rows, w.mr, w.prev_rep),
                 UNEXPECTED: ctx.unexpected_examples(w.unexp, w.why),
                 FINAL: ctx.final_examples(w.final_keys[:MAX_EXAMPLES], w.last_of)}
    if any(counts[a] for a in DEFINITE):
        verdict = "invalid"
    elif not recovery.finished:
        verdict = "unknown"
    elif counts[FINAL]:
        verdict = "invalid"
    else:
        verdict = "valid"
    per_key = {DOUBLE: kc[w.dbl_rows], MISSED: kc[w.miss_rows], REGRESSION: kc[w.reg_rows],
               FINAL: w.final_keys, REPEAT: kc[w.rep_rows]}
    bad_keys = _bad_keys(per_key, w.keys, output, w.unexp, kc)
    stats = {
        "input_records": int(len(w.input)), "output_records": int(w.n_out), "keys": int(w.nk),
        "keys_with_output": int(np.count_nonzero(w.last_of >= 0)),
        "matching_rows": int(np.count_nonzero(w.match)),
        "input_unparsable": int(np.count_nonzero(~w.in_ok)),
        "irregular_keys": int(len(w.irregular)), "split_keys": int(len(w.split)),
    }
    return {"verdict": verdict, "valid": {"valid": True, "invalid": False}.get(verdict, "unknown"),
            "counts": counts, "anomalies": anomalies, "stats": stats,
            "unknown_reasons": list(recovery.reasons) if not recovery.finished else [],
            "bad_keys": bad_keys, "definite": list(DEFINITE)}


def decode(frame: pd.DataFrame) -> pd.DataFrame:
    """Output Kafka records → the frame :func:`check` takes: the JSON ``value`` (bytes or str) is
    replaced by ``key`` (str; the record's Kafka ``key`` when the JSON has none) and ``count``,
    ``sum``, ``max_seq`` (Int64, NA when the value is not a JSON object or the field is missing or not
    an integer). Other columns (``partition``, ``offset``, ``op.*``, ...) are kept.

    Values that look like one-line JSON objects (bytes or str, ``{...}``, no newline) are parsed
    together by pyarrow's JSON reader, the others (garbage, tombstones) one by one with
    ``json.loads``; if pyarrow rejects the lot (a float, bool or string where an integer belongs, a
    repeated field, bad JSON inside braces, ...), every value goes through ``json.loads``, so both
    paths give the same columns."""
    vals = frame["value"].to_numpy(dtype=object) if "value" in frame.columns else np.zeros(0, object)
    raw, vals = vals, np.empty(len(vals), dtype=object)
    vals[:] = [v.encode("utf-8", "surrogatepass") if type(v) is str else v for v in raw.tolist()]
    good = np.fromiter((type(v) is bytes and v[:1] == b"{" and v[-1:] == b"}" and b"\n" not in v
                        for v in vals.tolist()), bool, len(vals))
    fast = _parse_arrow(vals[good]) if good.any() else None
    if fast is None:
        good[:] = False
    parsed = {f: np.full(len(vals), None, dtype=object) for f in ("key", *FIELDS)}
    slow = _parse_slow(vals[~good]) if not good.all() else None
    for f in parsed:
        if fast is not None:
            parsed[f][good] = fast[f]
        if slow is not None:
            parsed[f][~good] = slow[f]
    out = frame.drop(columns=["value"], errors="ignore").copy()
    key = pd.Series(parsed["key"], index=frame.index, dtype="string")
    if "key" in frame.columns:
        fb = frame["key"].map(lambda k: k.decode("utf-8", "replace") if isinstance(k, bytes) else k)
        key = key.fillna(fb.astype("string"))
    out["key"] = key
    for f in FIELDS:
        out[f] = pd.array(parsed[f], dtype="Int64")
    return out


# ----------------------------------------------------------------------------------------------------
# helpers

def _norm(df: pd.DataFrame, need: tuple[str, ...]) -> pd.DataFrame:
    for col in need:
        if col not in df.columns:
            df = df.assign(**{col: pd.Series(np.full(len(df), None, object), index=df.index)})
    return df


def _ints(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with 0 where invalid, valid mask): valid = an integer (not bool, not NA; a float
    only when integral; numeric strings are not integers)."""
    n = len(s)
    dt = s.dtype
    if pd.api.types.is_bool_dtype(dt):
        return np.zeros(n, np.int64), np.zeros(n, bool)
    if pd.api.types.is_integer_dtype(dt):
        ok = s.notna().to_numpy(dtype=bool)
        return s.to_numpy(dtype=np.int64, na_value=0), ok
    if pd.api.types.is_float_dtype(dt):
        v = s.to_numpy(dtype=float, na_value=np.nan)
        ok = np.isfinite(v) & (v == np.round(v)) & (np.abs(v) < 2.0 ** 63)
        return np.where(ok, v, 0).astype(np.int64), ok
    vals = s.to_numpy(dtype=object)
    ok = np.fromiter((isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                      for v in vals), bool, n)
    out = np.zeros(n, np.int64)
    if ok.any():
        out[ok] = np.asarray(vals[ok].tolist(), dtype=np.int64)
    return out, ok


def _str_keys(s: pd.Series) -> pd.Series:
    """Keys as str (bytes decoded as UTF-8), without copying a column that already is str."""
    if isinstance(s.dtype, pd.StringDtype):
        return s
    if s.dtype == object:
        vals = s.to_numpy()
        if all(type(v) is str for v in vals):
            return s
        return s.map(lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v))
    return s.astype(str)


def _parse_arrow(vals: np.ndarray) -> dict | None:
    """``vals`` (bytes, each ``{...}`` on one line) → per field an object array (None for NA), or
    None when pyarrow rejects them."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("key", pa.string())] + [(f, pa.int64()) for f in FIELDS])
    try:
        t = pj.read_json(pa.py_buffer(b"\n".join(vals)), read_options=pj.ReadOptions(block_size=16 << 20),
                         parse_options=pj.ParseOptions(explicit_schema=schema,
                                                       unexpected_field_behavior="ignore"))
    except (TypeError, pa.ArrowInvalid):
        return None
    if t.num_rows != len(vals):
        return None
    out = {"key": t.column("key").to_pandas().to_numpy(dtype=object)}
    for f in FIELDS:  # through the Arrow array: a null must not turn the column into floats
        out[f] = pd.Series(pd.arrays.ArrowExtensionArray(t.column(f))).astype("Int64").to_numpy(
            dtype=object, na_value=None)
    return out


def _parse_slow(vals: np.ndarray) -> dict:
    out = {f: [] for f in ("key", *FIELDS)}
    for v in vals:
        try:
            d = json.loads(v)
        except (TypeError, ValueError):
            d = None
        if not isinstance(d, dict):
            d = {}
        k = d.get("key")
        out["key"].append(k if isinstance(k, str) else None)
        for f in FIELDS:
            x = d.get(f)
            out[f].append(x if type(x) is int and -(1 << 63) <= x < (1 << 63) else None)
    return out


class _Ctx:
    """What the examples need; only the few example rows become Python objects."""

    def __init__(self, output, prov, keys, kc, c, s, m, fields_ok, pos, n, S, M, start, end):
        self.output, self.prov, self.keys, self.kc = output, prov, keys, kc
        self.c, self.s, self.m, self.fields_ok, self.pos = c, s, m, fields_ok, pos
        self.n, self.S, self.M, self.start, self.end = n, S, M, start, end

    def earliest(self, rows: np.ndarray) -> np.ndarray:
        if len(rows) > MAX_EXAMPLES:
            rows = rows[np.argpartition(self.pos[rows], MAX_EXAMPLES - 1)[:MAX_EXAMPLES]]
        return rows[np.argsort(self.pos[rows], kind="stable")]

    def row(self, r: int, with_fields: bool = True) -> dict:
        d = {"key": self.keys[self.kc[r]] if self.kc[r] >= 0 else _plain_key(self.output["key"].iloc[r])}
        if with_fields and self.fields_ok[r]:
            d.update(count=int(self.c[r]), sum=int(self.s[r]), max_seq=int(self.m[r]))
        d.update(examples.records(self.output.iloc[[r]], ["partition", "offset", *self.prov])[0])
        return d

    def agg(self, k: int, p: int) -> dict:
        i = self.start[k] + p - 1
        return {"count": int(p), "sum": int(self.S[i]), "max_seq": int(self.M[i])}

    def prefix_examples(self, rows: np.ndarray, p_near: np.ndarray, over: np.ndarray) -> list[dict]:
        out = []
        for r in self.earliest(rows).tolist():
            k = int(self.kc[r])
            d = self.row(r)
            if over[r]:
                d["why"] = "count above the key's input count"
            d["prefix"] = self.agg(k, int(p_near[r]))
            d["input_count"] = int(self.n[k])
            out.append(d)
        return out

    def after_examples(self, rows: np.ndarray, sorted_rows: np.ndarray, prev: np.ndarray) -> list[dict]:
        """``after``: the latest earlier row of the key (output order) showing the longer prefix."""
        want = dict(zip(rows.tolist(), prev.tolist()))
        chosen = self.earliest(rows).tolist()
        hit = np.flatnonzero(np.isin(sorted_rows, chosen))
        at = dict(zip(sorted_rows[hit].tolist(), hit.tolist()))
        out = []
        for r in chosen:
            i = at[r]
            j = i - 1
            while j >= 0 and self.c[sorted_rows[j]] != want[r]:
                j -= 1
            d = self.row(r)
            if j >= 0:
                d["after"] = {k: v for k, v in self.row(int(sorted_rows[j])).items() if k != "key"}
            out.append(d)
        return out

    def unexpected_examples(self, rows: np.ndarray, why: np.ndarray) -> list[dict]:
        out = []
        for r in self.earliest(rows).tolist():
            d = self.row(r)
            d["why"] = why[r]
            out.append(d)
        return out

    def final_examples(self, ks: np.ndarray, last_of: np.ndarray) -> list[dict]:
        out = []
        for k in ks.tolist():
            d = {"key": self.keys[k], "input_count": int(self.n[k]), "expected": self.agg(k, int(self.n[k]))}
            r = int(last_of[k])
            if r < 0:
                d["why"] = "no output for the key"
            else:
                d["why"] = "last aggregate is not the whole input"
                d["last"] = {k2: v for k2, v in self.row(r).items() if k2 != "key"}
            out.append(d)
        return out


def _plain_key(v):
    if examples.isna(v):
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _bad_keys(per_key: dict[str, np.ndarray], keys, output: pd.DataFrame, unexp: np.ndarray,
              kc: np.ndarray) -> dict[str, dict[str, int]]:
    """Per bad key, the count of each anomaly (the 50 worst keys by total). Unexpected rows count
    under their own key (in the input or not); rows without a key are left out."""
    parts = []
    for name, codes in per_key.items():
        if len(codes):
            parts.append(pd.Series(np.asarray(keys, dtype=object)[codes]).value_counts().rename(name))
    if len(unexp):
        known = kc[unexp] >= 0
        uk = np.empty(len(unexp), dtype=object)
        uk[known] = np.asarray(keys, dtype=object)[kc[unexp][known]]
        uk[~known] = [_plain_key(v) for v in output["key"].iloc[unexp[~known]].tolist()]
        uk = pd.Series(uk).dropna()
        if len(uk):
            parts.append(uk.value_counts().rename(UNEXPECTED))
    if not parts:
        return {}
    t = pd.concat(parts, axis=1).fillna(0).astype(int)
    t = t.loc[t.sum(axis=1).sort_values(ascending=False, kind="stable").index[:50]]
    return {str(k): {name: int(v) for name, v in row.items() if v} for k, row in t.iterrows()}
