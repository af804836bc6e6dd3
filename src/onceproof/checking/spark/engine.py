"""The exactly-once checker (``checkers/exactly_once.py``) as Spark DataFrame jobs.

Same input contract, same anomalies, same counts, same examples, same verdict: for any run both
checkers return equal result dicts (``tests/test_spark_engine.py`` compares them on runs with every
anomaly planted). The definitions, units and verdict rules are ``checkers/exactly_once.py``'s module
docstring; this module only says how the work is laid out so that nothing grows with the run in the
driver:

* frames in: Spark DataFrames with the pandas checker's columns (``history``: ``type``, ``f``, ``key``,
  ``seq``, ``partition``, ``offset``, ``error``; ``input``: ``key``, ``seq``, ``partition``, ``offset``;
  ``output``: those plus the ``op.*`` provenance columns) and a row-order column
  ``onceproof.store.spark_readers.ORD`` (added with ``monotonically_increasing_id()`` when absent). The pandas
  checker breaks ties between rows at the same (partition, offset) by row position; here the position
  is (partition, offset, ORD), the same order.
* a **pair** is (``str(key)``, ``seq``). Three shuffles build everything: output copies with a parsable
  ``op.input`` are joined to the input record at that (partition, offset) (the last row there, as the
  pandas lookup table keeps); input records get the count of copies that named them; then one table
  per pair (input count, unclaimed input records, copies, unpaired copies, first input and output
  position) from which duplicates, unexpected pairs, input duplicates and, with one window per key,
  the reorderings follow. ``lost`` ranks only the unclaimed records of pairs short of copies.
* to the driver: per-key counts of each anomaly (at most keys × 7 rows) and at most 10 example rows per
  anomaly. The per-key counts go through the pandas checker's own ``_bad_keys`` (its tie order
  included); examples are built with ``checkers/examples.py``'s rules (no NA fields, ``op.`` dropped).

Spark settings: none needed; the caller owns the session (``checking/spark/checks.py`` builds one).
The three big intermediate frames are persisted (memory, then disk) and released before returning.

Raises: whatever Spark raises for unreadable data (``Py4JJavaError``, ``AnalysisException``).
"""

from __future__ import annotations

import json
import weakref

from onceproof.checkers import exactly_once as eo
from onceproof.checkers.examples import isna, plain
from onceproof.store.spark_readers import ORD

MAX = eo.MAX_EXAMPLES
REF = r"^[0-9]{1,18}:[0-9]{1,18}\z"  # what exactly_once._parse_refs accepts: two ASCII decimals, ≤ 18 digits
NA_KEY = "<NA>"  # str() of a missing key in a pandas ``string`` column


def _F():
    from pyspark.sql import functions as F

    return F


_COLUMNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def columns(df) -> list[str]:
    """``df.columns``, fetched over py4j once per frame (each fetch is a schema round trip)."""
    try:
        return _COLUMNS[df]
    except KeyError:
        cols = _COLUMNS[df] = list(df.columns)
        return cols


def _c(df, name: str, cast: str | None = None):
    """Column ``name`` of ``df`` (dots allowed), or a typed null when ``df`` has none."""
    F = _F()
    c = F.col(f"`{name}`") if name in columns(df) else F.lit(None)
    return c.cast(cast) if cast else c


def with_order(df):
    """``df`` with :data:`ORD` (row order) if it lacks one."""
    return df if ORD in columns(df) else df.withColumn(ORD, _F().monotonically_increasing_id())


def _key(df):
    """``str(key)`` as the pandas checker factorises it (a missing key reads ``<NA>``)."""
    F = _F()
    return F.coalesce(_c(df, "key", "string"), F.lit(NA_KEY))


class _Pos:
    """A row's position, (partition, offset, ORD) in that order of precedence, as one sortable column.

    A long ``partition << (ob + rb) | offset << rb | ORD`` when all three are non-negative and their bit
    widths (from the data) fit in 62 bits: min/max of a long is a hash aggregate, while min/max of a
    struct is a sort aggregate (two sorts per grouping). Otherwise a struct, which orders the same.
    """

    def __init__(self, widths: tuple[int, int, int] | None):
        self.widths = widths

    def of(self, p="partition", o="offset", r=ORD):
        F = _F()
        if self.widths is None:
            return F.struct(F.col(p).alias("partition"), F.col(o).alias("offset"), F.col(r).alias(ORD))
        _, ob, rb = self.widths
        return F.shiftleft(F.col(p), ob + rb) + F.shiftleft(F.col(o), rb) + F.col(r)

    def place(self):
        """(partition, offset) alone, packed the same way (for max)."""
        F = _F()
        if self.widths is None:
            return F.struct("partition", "offset")
        _, ob, _ = self.widths
        return F.shiftleft(F.col("partition"), ob) + F.col("offset")

    def unpack(self, c, name: str):
        """``[partition, offset, ORD]`` columns of position column ``c``, aliased ``<name>_p`` etc."""
        F = _F()
        if self.widths is None:
            return [c["partition"].alias(f"{name}_p"), c["offset"].alias(f"{name}_o"), c[ORD].alias(f"{name}_r")]
        _, ob, rb = self.widths
        return [F.shiftright(c, ob + rb).alias(f"{name}_p"),
                F.shiftright(c, rb).bitwiseAND((1 << ob) - 1).alias(f"{name}_o"),
                c.bitwiseAND((1 << rb) - 1).alias(f"{name}_r")]

    def unpack_place(self, c, name: str):
        F = _F()
        if self.widths is None:
            return [c["partition"].alias(f"{name}_p"), c["offset"].alias(f"{name}_o")]
        _, ob, _ = self.widths
        return [F.shiftright(c, ob).alias(f"{name}_p"), c.bitwiseAND((1 << ob) - 1).alias(f"{name}_o")]


def _positions(I, O) -> _Pos:
    """The position packing both frames fit (one job over their partition, offset and ORD columns)."""
    F = _F()

    def agg(df, t):
        return df.agg(*[f(F.col(c)).alias(f"{t}{f.__name__}_{c}") for c in ("partition", "offset", ORD)
                        for f in (F.min, F.max)],
                      *[F.count(F.when(F.col(c).isNull(), 1)).alias(f"{t}null_{c}") for c in ("partition", "offset")])

    r = agg(I, "i").crossJoin(agg(O, "o")).first().asDict()
    if any(r[f"{t}null_{c}"] for t in "io" for c in ("partition", "offset")):
        return _Pos(None)
    bits = []
    for c in ("partition", "offset", ORD):
        lo = min(v for v in (r[f"imin_{c}"], r[f"omin_{c}"]) if v is not None) if \
            (r[f"imin_{c}"] is not None or r[f"omin_{c}"] is not None) else 0
        hi = max(v for v in (r[f"imax_{c}"], r[f"omax_{c}"]) if v is not None) if \
            (r[f"imax_{c}"] is not None or r[f"omax_{c}"] is not None) else 0
        if lo < 0:
            return _Pos(None)
        bits.append(max(1, int(hi).bit_length()))
    return _Pos(tuple(bits)) if sum(bits) <= 62 else _Pos(None)


def check(history, input, output, recovery: eo.Recovery | None = None, *, pack: bool = True) -> dict:
    """``onceproof.checkers.exactly_once.check`` on Spark DataFrames: the same result dict (``verdict``, ``valid``,
    ``counts``, ``anomalies``, ``stats``, ``unknown_reasons``, ``bad_keys``, ``definite``).

    ``history`` may be ``None`` (no workload history: a check of foreign topics). ``pack`` false keeps
    positions as structs even when they would fit a long (the slower path, for tests).
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window

    F = _F()
    recovery = recovery or eo.Recovery()
    spark = input.sparkSession
    keep = StorageLevel.MEMORY_AND_DISK
    held = []

    def persist(df):
        held.append(df.persist(keep))
        return df

    # ---- input records with a seq: pair, place, order
    inp0 = with_order(input)
    I = inp0.where(_c(inp0, "seq").isNotNull()).select(
        _key(inp0).alias("key_s"), _c(inp0, "seq", "long").alias("seq"), _c(inp0, "partition", "long").alias("partition"),
        _c(inp0, "offset", "long").alias("offset"), F.col(ORD))

    # ---- output copies: pair, order, op.input parsed
    out0 = with_order(output)
    prov = [c for c in columns(output) if c.startswith("op.")]
    ref = _c(out0, eo.INPUT_REF, "string")
    has_ref = F.coalesce(ref.rlike(REF), F.lit(False))
    parts = F.split(ref, ":")
    O = out0.select(_key(out0).alias("key_s"), _c(out0, "seq", "long").alias("seq"),
                    _c(out0, "partition", "long").alias("partition"), _c(out0, "offset", "long").alias("offset"),
                    F.col(ORD), _c(out0, "seq").isNotNull().alias("ok"), has_ref.alias("has_ref"),
                    F.when(has_ref, parts[0].cast("long")).alias("ref_p"),
                    F.when(has_ref, parts[1].cast("long")).alias("ref_o"))
    pos = _Pos(None) if not pack else _positions(I, O)
    # the input row at each (partition, offset): the last one, as the pandas lookup table keeps (hash
    # aggregate of ORD, then a join on the same partitioning)
    last = I.groupBy("partition", "offset").agg(F.max(ORD).alias("_last"))
    places = I.join(last, ["partition", "offset"]).where(F.col(ORD) == F.col("_last")).select(
        F.col("partition").alias("lp"), F.col("offset").alias("lo"), F.col(ORD).alias("named_ord"),
        F.col("key_s").alias("named_key"), F.col("seq").alias("named_seq"))
    with_ref = O.where("has_ref").join(places, (F.col("ref_p") == F.col("lp")) & (F.col("ref_o") == F.col("lo")),
                                       "left").drop("lp", "lo")
    without = O.where(~F.col("has_ref")).select(
        "*", *[F.lit(None).cast(t).alias(n) for n, t in (("named_ord", "long"), ("named_key", "string"),
                                                          ("named_seq", "long"))])
    matched = F.col("ok") & F.col("named_ord").isNotNull() & (F.col("named_key") == F.col("key_s")) & \
        (F.col("named_seq") == F.col("seq"))
    OA = persist(with_ref.unionByName(without).select(
        "*", F.coalesce(matched, F.lit(False)).alias("matched"),
        (F.col("ok") & F.col("has_ref") & ~F.coalesce(matched, F.lit(False))).alias("mismatch"),
        (F.col("ok") & ~F.col("has_ref")).alias("free")).drop("ref_p", "ref_o"))

    # ---- input records with the number of copies that named them (per_rec)
    per_rec = OA.where("matched").groupBy(F.col("named_ord").alias("r_ord")).agg(F.count(F.lit(1)).alias("c_r"))
    IA = persist(I.join(per_rec, F.col(ORD) == F.col("r_ord"), "left").drop("r_ord").fillna(0, ["c_r"]))

    # ---- one row per pair
    PI = IA.groupBy("key_s", "seq").agg(
        F.count(F.lit(1)).alias("cnt_in"), F.sum((F.col("c_r") == 0).cast("long")).alias("unclaimed"),
        F.sum(F.greatest(F.col("c_r") - 1, F.lit(0))).alias("twice"),
        F.min(pos.of()).alias("first_in"), F.max(pos.place()).alias("last_place"))
    PO = OA.where("ok").groupBy("key_s", "seq").agg(
        F.count(F.lit(1)).alias("cnt_out"), F.sum(F.col("free").cast("long")).alias("n_free"),
        F.min(pos.of()).alias("first_out"))
    excess = F.when(F.col("cnt_in") > 0, F.greatest(F.col("n_free") - F.col("unclaimed"), F.lit(0))).otherwise(
        F.greatest(F.col("cnt_out") - 1, F.lit(0)))
    P = persist(PI.join(PO, ["key_s", "seq"], "full").fillna(0, ["cnt_in", "unclaimed", "twice", "cnt_out", "n_free"])
                .withColumn("excess", excess)
                .withColumn("dup", (F.col("excess") > 0) | (F.col("twice") > 0)))

    # ---- lost: unclaimed records beyond their pair's unpaired copies, in (partition, offset) order
    short = P.where(F.col("unclaimed") > F.col("n_free")).select("key_s", "seq", "n_free")
    rank = F.row_number().over(Window.partitionBy("key_s", "seq").orderBy(pos.of())) - 1
    LOST = IA.where(F.col("c_r") == 0).join(short, ["key_s", "seq"]).withColumn("rank", rank).where(
        F.col("rank") >= F.col("n_free"))

    # ---- the pairs' anomalies
    DUP = P.where("dup")
    ABSENT = P.where(F.col("cnt_in") == 0)  # output pairs not in the input: unexpected, counted per pair
    IDUP = P.where(F.col("cnt_in") > 1)
    MIS = OA.where("mismatch").join(P.where(F.col("cnt_in") > 0).select("key_s", "seq"), ["key_s", "seq"], "left_semi")
    BAD = OA.where(~F.col("ok"))
    w = Window.partitionBy("key_s").orderBy("first_out")
    BACK = P.where((F.col("cnt_in") > 0) & (F.col("cnt_out") > 0)).select(
        "key_s", "seq", "first_out", "first_in", F.lag("first_in").over(w).alias("prev_in"),
        F.lag("seq").over(w).alias("prev_seq")).where(F.col("first_in") < F.col("prev_in"))

    # ---- history: acknowledged and failed sends against the input's pairs
    H = h0 = None
    if history is not None and len(columns(history)):
        h0 = with_order(history)
        hs = h0.where((_c(h0, "f", "string") == "send") & _c(h0, "type", "string").isin("ok", "fail"))
        H = hs.select(_key_plain(hs).alias("key_s"), _c(hs, "seq").try_cast("double").cast("long").alias("seq"),
                      _c(hs, "type", "string").alias("type"), _c(hs, "partition").alias("partition"),
                      _c(hs, "offset").alias("offset"), _c(hs, "error", "string").alias("error"), F.col(ORD))
        H = persist(H.join(P.where(F.col("cnt_in") > 0).select("key_s", "seq", "last_place", F.lit(True).alias("in_input")),
                           ["key_s", "seq"], "left"))
    LW = H.where((F.col("type") == "ok") & F.col("in_input").isNull()) if H is not None else None
    FV = H.where((F.col("type") == "fail") & F.col("in_input").isNotNull()) if H is not None else None

    # ---- per-key counts of every anomaly (one job), and the totals that are not per key
    tagged = [("duplicate", DUP), ("lost", LOST), ("unexpected", ABSENT), ("unexpected", MIS),
              ("nonmonotonic", BACK), ("input-duplicate", IDUP)]
    if H is not None:
        tagged += [("lost-write", LW), ("failed-write-visible", FV)]
    per_key_df = None
    for name, df in tagged:
        part = df.groupBy("key_s").count().select(F.lit(name).alias("a"), "key_s", "count")
        per_key_df = part if per_key_df is None else per_key_df.unionByName(part)
    per_key: dict[str, dict[str, int]] = {}
    for r in per_key_df.collect():
        d = per_key.setdefault(r["a"], {})
        d[r["key_s"]] = d.get(r["key_s"], 0) + int(r["count"])
    tot = _totals(P, OA, inp0, h0)
    hstats = tot["history"]
    keep_cols = list(hstats["float_place"])
    n_input = tot["input_records"]

    def total(name: str) -> int:
        return sum(per_key.get(name, {}).values())

    counts = {"lost": total("lost"), "duplicate": total("duplicate"),
              "duplicate-records": tot["excess"] + tot["twice"],
              "unexpected": total("unexpected") + tot["bad"], "nonmonotonic": total("nonmonotonic"),
              "lost-write": total("lost-write"), "failed-write-visible": total("failed-write-visible"),
              "input-duplicate": total("input-duplicate"), "input-duplicate-records": tot["idup_rec"]}

    # ---- examples: the first rows of each anomaly, the copies of the first duplicated pairs and the input
    # places of the first input duplicates (one job), then the output rows' own columns (one job)
    top_dup = DUP.orderBy("first_out").limit(MAX).select("key_s", "seq")
    copy_n = F.row_number().over(Window.partitionBy("key_s", "seq").orderBy(pos.of()))
    top_idup = IDUP.orderBy("first_in").limit(MAX).select("key_s", "seq")
    ex = _first_rows(spark, {
        "copies": (OA.where("ok").join(top_dup, ["key_s", "seq"]).withColumn("n", copy_n).where(F.col("n") <= MAX),
                   ["key_s", "seq", "n"], ["key_s", "seq", ORD], MAX * MAX),
        "places": (IA.join(top_idup, ["key_s", "seq"]), [pos.of()], ["key_s", "seq", "partition", "offset"], None),
        "lost": (LOST, [pos.of()], ["key_s", "seq", "partition", "offset"]),
        "duplicate": (DUP, ["first_out"], ["key_s", "seq"]),
        "absent": (ABSENT, ["first_out"], ["key_s", "seq", *pos.unpack(F.col("first_out"), "fo")]),
        "mismatch": (MIS, [pos.of()], ["key_s", "seq", ORD, "named_ord", "named_key", "named_seq"]),
        "bad": (BAD, [pos.of()], [ORD]),
        "nonmonotonic": (BACK, ["first_out"], ["key_s", "seq", "prev_seq", *pos.unpack(F.col("first_out"), "fo")]),
        "input-duplicate": (IDUP, ["first_in"], ["key_s", "seq"]),
        **({"lost-write": (LW, [ORD], ["key_s", "seq", *keep_cols]),
            "failed-write-visible": (FV, [ORD], ["key_s", "seq", *pos.unpack_place(F.col("last_place"), "lp"), "error"])} if H is not None else {}),
    })
    dup_pairs = [(r["key_s"], r["seq"]) for r in ex["duplicate"]]
    copies: dict[tuple, list[int]] = {p: [] for p in dup_pairs}
    for r in ex["copies"]:
        copies[(r["key_s"], r["seq"])].append(r[ORD])
    idup_pairs = [(r["key_s"], r["seq"]) for r in ex["input-duplicate"]]
    idup_places: dict[tuple, list[tuple[int, int]]] = {p: [] for p in idup_pairs}
    for r in ex["places"]:
        idup_places[(r["key_s"], r["seq"])].append((int(r["partition"]), int(r["offset"])))
    want = {r["fo_r"] for r in ex["absent"]} | {r[ORD] for r in ex["mismatch"]} | \
        {r[ORD] for r in ex["bad"]} | {r["fo_r"] for r in ex["nonmonotonic"]} | \
        {o for rows in copies.values() for o in rows}
    rows = _rows_by_order(out0, want)

    def rec(o: int, cols: list[str], extra: dict) -> dict:
        row = rows[o]
        return _plain_record({c: extra[c] if c in extra else row.get(c) for c in cols})

    anomalies = {}
    anomalies["lost"] = [{"key": r["key_s"], "seq": int(r["seq"]), "input_partition": int(r["partition"]),
                          "input_offset": int(r["offset"])} for r in ex["lost"]]
    anomalies["duplicate"] = [{"key": k, "seq": int(s), "copies": [rec(o, ["partition", "offset", *prov], {})
                                                                  for o in copies[(k, s)][:MAX]]}
                              for k, s in dup_pairs]
    ux = [rec(r["fo_r"], ["key", "seq", "partition", "offset", "why", *prov],
              {"key": r["key_s"], "seq": r["seq"], "why": "not in the input"}) for r in ex["absent"]]
    for r in ex["mismatch"][:MAX - len(ux)]:
        named = "(no such input record)" if r["named_ord"] is None else \
            f"holding ({r['named_key']}, {int(r['named_seq'])})"
        ux.append(rec(r[ORD], ["key", "seq", "partition", "offset", "why", *prov],
                      {"key": r["key_s"], "seq": r["seq"], "why": f"op.input names input {named}"}))
    for r in ex["bad"][:MAX - len(ux)]:
        ux.append(rec(r[ORD], ["key", "partition", "offset", "why", *prov], {"why": "value without key/seq"}))
    anomalies["unexpected"] = ux
    anomalies["nonmonotonic"] = [rec(r["fo_r"], ["key", "seq", "prev_seq", "partition", "offset", *prov],
                                     {"key": r["key_s"], "seq": r["seq"], "prev_seq": int(r["prev_seq"])})
                                 for r in ex["nonmonotonic"]]
    if H is not None:
        fl = hstats["float_place"]
        anomalies["lost-write"] = [_plain_record(
            {"key": r["key_s"], "seq": int(r["seq"]),
             **{n: _place_value(r[n], fl[n]) for n in keep_cols}}) for r in ex["lost-write"]]
        anomalies["failed-write-visible"] = [
            {"key": r["key_s"], "seq": int(r["seq"]),
             **({"input_partition": int(r["lp_p"]), "input_offset": int(r["lp_o"])} if r["lp_p"] is not None else {}),
             **({"error": r["error"]} if r["error"] is not None else {})} for r in ex["failed-write-visible"]]
    else:
        anomalies["lost-write"], anomalies["failed-write-visible"] = [], []
    anomalies["input-duplicate"] = []
    for k, s in idup_pairs:
        pl = sorted(idup_places[(k, s)])
        anomalies["input-duplicate"].append({"key": k, "seq": int(s), "input_partition": pl[-1][0],
                                             "input_offset": pl[-1][1],
                                             "inputs": [{"partition": p, "offset": o} for p, o in pl]})

    # exactly_once's rule: a definite anomaly, or a loss once recovery finished, is invalid
    definite = eo.DEFINITE + (eo.DEFINITE_WITH_HISTORY if hstats["has_workload"] else ())
    firm = any(counts[a] for a in definite)
    verdict = "invalid" if firm or (recovery.finished and counts["lost"]) else \
        "unknown" if not recovery.finished else "valid"
    bad_keys = eo._bad_keys({name: _per_key_series(d) for name, d in per_key.items() if d})
    sends = hstats["sends"]
    stats = {"input_records": n_input, "output_records": tot["n_out"], "keys": tot["keys"],
             "sends_ok": sends.get("ok", 0), "sends_fail": sends.get("fail", 0), "sends_info": sends.get("info", 0),
             "output_with_input_ref": tot["refs"]}
    for df in held:
        df.unpersist()
    return {"verdict": verdict, "valid": {"valid": True, "invalid": False}.get(verdict, "unknown"),
            "counts": counts, "anomalies": {a: anomalies[a] for a in _ORDER}, "stats": stats,
            "unknown_reasons": list(recovery.reasons) if not recovery.finished else [],
            "bad_keys": bad_keys, "definite": list(definite)}


_ORDER = ("lost", "duplicate", "unexpected", "nonmonotonic", "lost-write", "failed-write-visible", "input-duplicate")


def _key_plain(df):
    """``str(key)`` of a history column read from JSON (object dtype in pandas: a missing key reads
    ``None``)."""
    F = _F()
    return F.coalesce(_c(df, "key", "string"), F.lit("None"))


def _history_agg(h0):
    """One row over the history: sends by outcome, all sends, ops holding ``partition`` / ``offset``,
    all ops (read by :func:`_history_stats`)."""
    F = _F()
    send = _c(h0, "f", "string") == "send"
    t = _c(h0, "type", "string")
    return h0.agg(*[F.count(F.when(send & (t == k), 1)).alias(f"h_{k}") for k in ("ok", "fail", "info")],
                  F.count(F.when(send, 1)).alias("h_sends"),
                  *[F.count(_c(h0, n)).alias(f"h_{n}") for n in ("partition", "offset")],
                  F.count(F.lit(1)).alias("h_n"))


def _history_stats(r: dict) -> dict:
    """Sends by outcome (the types present), whether there is any send (a workload ran), and per column
    ``partition`` / ``offset`` that some op has, whether pandas holds it as float (some op lacks it, so
    the column has NaN): that is how the pandas checker's lost-write examples show it (``3.0``)."""
    return {"sends": {k: int(r[f"h_{k}"]) for k in ("ok", "fail", "info") if r[f"h_{k}"]},
            "has_workload": bool(r["h_sends"]),
            "float_place": {n: r[f"h_{n}"] < r["h_n"] for n in ("partition", "offset") if r[f"h_{n}"]}}


def _place_value(v, as_float: bool):
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        return v
    return x if as_float else int(x)


def _plain_record(d: dict) -> dict:
    """An example as ``onceproof.checkers.examples.records`` makes it: NA fields dropped, ``op.`` prefixes too."""
    return {k.removeprefix("op."): plain(v) for k, v in d.items() if v is not None and not isna(v)}


def _first_rows(spark, queries: dict) -> dict[str, list]:
    """``{name: (frame, order columns, columns[, limit])}`` → ``{name: the first rows of frame in that
    order (MAX, or ``limit``; ``None`` = all), as dicts of those columns}``, in one Spark job (each branch
    is sorted and limited, then the branches are unioned as JSON)."""
    F = _F()
    union = None
    for name, (df, order, cols, *lim) in queries.items():
        limit = lim[0] if lim else MAX
        j = F.to_json(F.struct(*cols, F.struct(*order).alias("_o")), {"ignoreNullFields": "false"})
        sel = df.orderBy(*order) if limit is None else df.orderBy(*order).limit(limit)
        part = sel.select(F.lit(name).alias("q"), j.alias("j"))
        union = part if union is None else union.unionByName(part)
    out: dict[str, list] = {name: [] for name in queries}
    for r in union.collect():
        out[r["q"]].append(json.loads(r["j"]))
    for name in queries:
        out[name].sort(key=lambda d: _sort_key(d["_o"]))
        out[name] = [_Row(d) for d in out[name]]
    return out


def _totals(P, OA, inp0, h0) -> dict:
    """The totals that are not per key, in one job: duplicate-records (excess + twice), input duplicate
    records, distinct input keys, output rows, rows with ``op.input``, values without seq, input rows,
    and the history's (``_history_stats``)."""
    F = _F()
    row = P.agg(F.sum("excess").alias("excess"), F.sum("twice").alias("twice"),
                F.sum(F.when(F.col("cnt_in") > 1, F.col("cnt_in") - 1)).alias("idup_rec"),
                F.countDistinct(F.when(F.col("cnt_in") > 0, F.col("key_s"))).alias("keys")).crossJoin(
        OA.agg(F.count(F.lit(1)).alias("n_out"), F.sum(F.col("has_ref").cast("long")).alias("refs"),
               F.sum((~F.col("ok")).cast("long")).alias("bad"))).crossJoin(
        inp0.agg(F.count(F.lit(1)).alias("input_records")))
    if h0 is not None:
        row = row.crossJoin(_history_agg(h0))
    r = row.first().asDict()
    out = {k: int(r[k] or 0) for k in ("excess", "twice", "idup_rec", "keys", "n_out", "refs", "bad", "input_records")}
    out["history"] = _history_stats(r) if h0 is not None else {"sends": {}, "has_workload": False, "float_place": {}}
    return out


class _Row(dict):
    """A JSON-decoded row whose missing fields read as ``None`` (``to_json`` drops nulls)."""

    def __missing__(self, key):
        return None


def _sort_key(o: dict) -> tuple:
    """The order struct (as JSON) → a tuple that sorts like Spark sorted it (ascending, nulls first)."""
    out = []
    for v in o.values() if isinstance(o, dict) else [o]:
        if isinstance(v, dict):
            out.append((1, _sort_key(v)))
        else:
            out.append((0, ()) if v is None else (1, v))
    return tuple(out)


def _rows_by_order(df, orders: set[int]) -> dict[int, dict]:
    """The rows of ``df`` whose :data:`ORD` is in ``orders``, as dicts of their original columns."""
    F = _F()
    if not orders:
        return {}
    got = df.where(F.col(ORD).isin(sorted(orders))).collect()
    return {r[ORD]: r.asDict() for r in got}


def _per_key_series(d: dict[str, int]):
    """What ``exactly_once._per_key`` gives: counts indexed by key (str), sorted by key."""
    import pandas as pd

    return pd.Series(list(d.values()), index=pd.Index(list(d.keys()), dtype=object, name="key"),
                     dtype="int64").sort_index()
