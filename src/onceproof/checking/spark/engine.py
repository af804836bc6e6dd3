"""The exactly-once checker (``checkers/exactly_once.py``) as Spark DataFrame jobs.

Same input contract, same anomalies, same counts, same examples, same verdict: for any run both
checkers return equal result dicts (``tests/unit/test_spark_engine.py`` compares them on runs with every
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

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F

from onceproof.checkers import exactly_once as eo
from onceproof.checkers.examples import isna, plain
from onceproof.sinks.base import ORDER_RANK
from onceproof.store.spark_readers import ORD

MAX = eo.MAX_EXAMPLES
REF = r"^[0-9]{1,18}:[0-9]{1,18}\z"  # what exactly_once._parse_refs accepts: two ASCII decimals, ≤ 18 digits
NA_KEY = "<NA>"  # str() of a missing key in a pandas ``string`` column


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
    c = F.col(f"`{name}`") if name in columns(df) else F.lit(None)
    return c.cast(cast) if cast else c


def with_order(df):
    """``df`` with :data:`ORD` (row order) if it lacks one."""
    return df if ORD in columns(df) else df.withColumn(ORD, F.monotonically_increasing_id())


def _key(df):
    """``str(key)`` as the pandas checker factorises it (a missing key reads ``<NA>``)."""
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
        if self.widths is None:
            return F.struct(F.col(p).alias("partition"), F.col(o).alias("offset"), F.col(r).alias(ORD))
        _, ob, rb = self.widths
        return F.shiftleft(F.col(p), ob + rb) + F.shiftleft(F.col(o), rb) + F.col(r)

    def place(self):
        """(partition, offset) alone, packed the same way (for max)."""
        if self.widths is None:
            return F.struct("partition", "offset")
        _, ob, _ = self.widths
        return F.shiftleft(F.col("partition"), ob) + F.col("offset")

    def unpack(self, c, name: str):
        """``[partition, offset, ORD]`` columns of position column ``c``, aliased ``<name>_p`` etc."""
        if self.widths is None:
            return [c["partition"].alias(f"{name}_p"), c["offset"].alias(f"{name}_o"), c[ORD].alias(f"{name}_r")]
        _, ob, rb = self.widths
        return [F.shiftright(c, ob + rb).alias(f"{name}_p"),
                F.shiftright(c, rb).bitwiseAND((1 << ob) - 1).alias(f"{name}_o"),
                c.bitwiseAND((1 << rb) - 1).alias(f"{name}_r")]

    def partition_of(self, c):
        """The partition of position column ``c``."""
        if self.widths is None:
            return c["partition"]
        _, ob, rb = self.widths
        return F.shiftright(c, ob + rb)

    def unpack_place(self, c, name: str):
        if self.widths is None:
            return [c["partition"].alias(f"{name}_p"), c["offset"].alias(f"{name}_o")]
        _, ob, _ = self.widths
        return [F.shiftright(c, ob).alias(f"{name}_p"), c.bitwiseAND((1 << ob) - 1).alias(f"{name}_o")]


def _positions(inputs, outputs) -> _Pos:
    """The position packing both frames fit (one job over their partition, offset and ORD columns)."""

    def agg(df, t):
        return df.agg(*[f(F.col(c)).alias(f"{t}{f.__name__}_{c}") for c in ("partition", "offset", ORD)
                        for f in (F.min, F.max)],
                      *[F.count(F.when(F.col(c).isNull(), 1)).alias(f"{t}null_{c}") for c in ("partition", "offset")])

    r = agg(inputs, "i").crossJoin(agg(outputs, "o")).first().asDict()
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
    ``counts``, ``anomalies``, ``stats``, ``unknown_reasons``, ``bad_keys``, ``definite``, ``order``).

    ``history`` may be ``None`` (no workload history: a check of foreign topics). ``pack`` false keeps
    positions as structs even when they would fit a long (the slower path, for tests).
    """
    recovery = recovery or eo.Recovery()
    w = _Work(spark=input.sparkSession, held=[])
    try:
        _frames(w, input, output, pack)
        _pairs(w)
        _anomaly_frames(w)
        _history_frames(w, history)
        _counts(w)
        _examples(w)
        anomalies = _anomalies(w)
        definite = eo.DEFINITE + (eo.DEFINITE_WITH_HISTORY if w.hstats["has_workload"] else ())
        verdict = _verdict(w.counts, definite, recovery)
        bad_keys = eo._bad_keys({name: _per_key_series(d) for name, d in w.per_key.items() if d})
        sends, tot = w.hstats["sends"], w.tot
        stats = {"input_records": tot["input_records"], "output_records": tot["n_out"], "keys": tot["keys"],
                 "sends_ok": sends.get("ok", 0), "sends_fail": sends.get("fail", 0),
                 "sends_info": sends.get("info", 0), "output_with_input_ref": tot["refs"]}
    finally:
        for df in w.held:
            df.unpersist()
    return {"verdict": verdict, "valid": {"valid": True, "invalid": False}.get(verdict, "unknown"),
            "counts": w.counts, "anomalies": {a: anomalies[a] for a in _ORDER}, "stats": stats,
            "unknown_reasons": list(recovery.reasons) if not recovery.finished else [],
            "bad_keys": bad_keys, "definite": list(definite), "order": w.order}


def _verdict(counts: dict[str, int], definite: tuple[str, ...], recovery: eo.Recovery) -> str:
    """exactly_once's rule: a definite anomaly, or a loss once recovery finished, is invalid."""
    firm = any(counts[a] for a in definite)
    return "invalid" if firm or (recovery.finished and counts["lost"]) else \
        "unknown" if not recovery.finished else "valid"


class _Work:
    """The frames one :func:`check` builds step by step (``inputs``/``outputs``: the input records with a
    seq and the output copies; ``OA``/``IA``: both after pairing; ``P``: one row per pair; one frame per
    anomaly), and what the driver collects of them. ``held``: the persisted frames, released at the end."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def persist(self, df):
        self.held.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df


def _frames(w: _Work, input, output, pack: bool) -> None:
    """Input records with a seq (pair, place, order), output copies (pair, order, ``op.input`` parsed) and
    the position packing both fit."""
    w.inp0 = inp0 = with_order(input)
    w.inputs = inp0.where(_c(inp0, "seq").isNotNull()).select(
        _key(inp0).alias("key_s"), _c(inp0, "seq", "long").alias("seq"),
        _c(inp0, "partition", "long").alias("partition"), _c(inp0, "offset", "long").alias("offset"), F.col(ORD))
    w.out0 = out0 = with_order(output)
    w.prov = [c for c in columns(output) if c.startswith("op.")]
    ref = _c(out0, eo.INPUT_REF, "string")
    has_ref = F.coalesce(ref.rlike(REF), F.lit(False))
    parts = F.split(ref, ":")
    w.outputs = out0.select(_key(out0).alias("key_s"), _c(out0, "seq", "long").alias("seq"),
                            _c(out0, "partition", "long").alias("partition"),
                            _c(out0, "offset", "long").alias("offset"),
                            F.col(ORD), _c(out0, ORDER_RANK, "long").alias("rank"),
                            _c(out0, "seq").isNotNull().alias("ok"), has_ref.alias("has_ref"),
                            F.when(has_ref, parts[0].cast("long")).alias("ref_p"),
                            F.when(has_ref, parts[1].cast("long")).alias("ref_o"))
    w.pos = _Pos(None) if not pack else _positions(w.inputs, w.outputs)
    w.order = (eo.ORDER_BY_POSITION if ORDER_RANK not in columns(output) else
               eo.ORDER_BY_RANK if output.where(_c(output, ORDER_RANK).isNotNull()).limit(1).count() else
               eo.NOT_JUDGED)


def _pairs(w: _Work) -> None:
    """Output copies joined to the input record their ``op.input`` names (``OA``), input records with the
    number of copies that named them (``IA``), and one row per pair (``P``)."""
    inputs, outputs, pos = w.inputs, w.outputs, w.pos
    # the input row at each (partition, offset): the last one, as the pandas lookup table keeps (hash
    # aggregate of ORD, then a join on the same partitioning)
    last = inputs.groupBy("partition", "offset").agg(F.max(ORD).alias("_last"))
    places = inputs.join(last, ["partition", "offset"]).where(F.col(ORD) == F.col("_last")).select(
        F.col("partition").alias("lp"), F.col("offset").alias("lo"), F.col(ORD).alias("named_ord"),
        F.col("key_s").alias("named_key"), F.col("seq").alias("named_seq"))
    with_ref = outputs.where("has_ref").join(
        places, (F.col("ref_p") == F.col("lp")) & (F.col("ref_o") == F.col("lo")), "left").drop("lp", "lo")
    without = outputs.where(~F.col("has_ref")).select(
        "*", *[F.lit(None).cast(t).alias(n) for n, t in (("named_ord", "long"), ("named_key", "string"),
                                                          ("named_seq", "long"))])
    matched = F.col("ok") & F.col("named_ord").isNotNull() & (F.col("named_key") == F.col("key_s")) & \
        (F.col("named_seq") == F.col("seq"))
    w.OA = OA = w.persist(with_ref.unionByName(without).select(
        "*", F.coalesce(matched, F.lit(False)).alias("matched"),
        (F.col("ok") & F.col("has_ref") & ~F.coalesce(matched, F.lit(False))).alias("mismatch"),
        (F.col("ok") & ~F.col("has_ref")).alias("free")).drop("ref_p", "ref_o"))
    per_rec = OA.where("matched").groupBy(F.col("named_ord").alias("r_ord")).agg(F.count(F.lit(1)).alias("c_r"))
    w.IA = IA = w.persist(inputs.join(per_rec, F.col(ORD) == F.col("r_ord"), "left").drop("r_ord")
                          .fillna(0, ["c_r"]))
    PI = IA.groupBy("key_s", "seq").agg(
        F.count(F.lit(1)).alias("cnt_in"), F.sum((F.col("c_r") == 0).cast("long")).alias("unclaimed"),
        F.sum(F.greatest(F.col("c_r") - 1, F.lit(0))).alias("twice"),
        F.min(pos.of()).alias("first_in"), F.max(pos.place()).alias("last_place"))
    PO = OA.where("ok").groupBy("key_s", "seq").agg(
        F.count(F.lit(1)).alias("cnt_out"), F.sum(F.col("free").cast("long")).alias("n_free"),
        F.min(pos.of()).alias("first_out"), F.min_by("rank", pos.of()).alias("first_rank"))
    excess = F.when(F.col("cnt_in") > 0, F.greatest(F.col("n_free") - F.col("unclaimed"), F.lit(0))).otherwise(
        F.greatest(F.col("cnt_out") - 1, F.lit(0)))
    w.P = w.persist(PI.join(PO, ["key_s", "seq"], "full")
                    .fillna(0, ["cnt_in", "unclaimed", "twice", "cnt_out", "n_free"])
                    .withColumn("excess", excess)
                    .withColumn("dup", (F.col("excess") > 0) | (F.col("twice") > 0)))


def _anomaly_frames(w: _Work) -> None:
    """One frame per anomaly of the output and input: lost (unclaimed records beyond their pair's
    unpaired copies, in (partition, offset) order), duplicate, absent (output pairs not in the input:
    unexpected, counted per pair), input duplicates, mismatched ``op.input``, values without seq, and
    reorderings (per key and input partition, with one window: the local checker's rule)."""
    P, OA, pos = w.P, w.OA, w.pos
    short = P.where(F.col("unclaimed") > F.col("n_free")).select("key_s", "seq", "n_free")
    rank = F.row_number().over(Window.partitionBy("key_s", "seq").orderBy(pos.of())) - 1
    w.LOST = w.IA.where(F.col("c_r") == 0).join(short, ["key_s", "seq"]).withColumn("rank", rank).where(
        F.col("rank") >= F.col("n_free"))
    w.DUP = P.where("dup")
    w.ABSENT = P.where(F.col("cnt_in") == 0)
    w.IDUP = P.where(F.col("cnt_in") > 1)
    w.MIS = OA.where("mismatch").join(P.where(F.col("cnt_in") > 0).select("key_s", "seq"), ["key_s", "seq"],
                                      "left_semi")
    w.BAD = OA.where(~F.col("ok"))
    # the output order (exactly_once._output_order): positions; or ranks, one rank's rows taken in input
    # order; or none at all
    ranked = w.order == eo.ORDER_BY_RANK
    by_out = Window.partitionBy("key_s", pos.partition_of(F.col("first_in"))).orderBy(
        *(("first_rank", "first_in") if ranked else ("first_out",)))
    judged = (F.col("cnt_in") > 0) & (F.col("cnt_out") > 0) & (
        F.col("first_rank").isNotNull() if ranked else F.lit(w.order == eo.ORDER_BY_POSITION))
    w.BACK = P.where(judged).select(
        "key_s", "seq", "first_out", "first_in", "first_rank", F.lag("first_in").over(by_out).alias("prev_in"),
        F.lag("seq").over(by_out).alias("prev_seq")).where(F.col("first_in") < F.col("prev_in"))


def _history_frames(w: _Work, history) -> None:
    """The history's acknowledged and failed sends against the input's pairs (``H``), the lost writes
    (``LW``) and the failed writes visible (``FV``); all ``None`` without a history."""
    w.H = w.h0 = w.LW = w.FV = w.FAILED = None
    w.AIR = w.ABSENT.limit(0)
    if history is None or not len(columns(history)):
        return
    w.h0 = h0 = with_order(history)
    hs = h0.where((_c(h0, "f", "string") == "send") & _c(h0, "type", "string").isin("ok", "fail"))
    H = hs.select(_key_plain(hs).alias("key_s"), _c(hs, "seq").try_cast("double").cast("long").alias("seq"),
                  _c(hs, "type", "string").alias("type"), _c(hs, "partition").alias("partition"),
                  _c(hs, "offset").alias("offset"), _c(hs, "error", "string").alias("error"),
                  _c(hs, "txn", "string").alias("txn"), F.col(ORD))
    in_input = w.P.where(F.col("cnt_in") > 0).select("key_s", "seq", "last_place", F.lit(True).alias("in_input"))
    w.H = H = w.persist(H.join(in_input, ["key_s", "seq"], "left"))
    w.LW = H.where((F.col("type") == "ok") & F.col("in_input").isNull())
    w.FV = H.where((F.col("type") == "fail") & F.col("in_input").isNotNull())
    # output pairs not in the input that were failed sends (an aborted input transaction's records) are
    # aborted-input-read, not unexpected
    w.FAILED = H.where((F.col("type") == "fail") & F.col("in_input").isNull())
    pairs = w.FAILED.select("key_s", "seq").distinct()
    w.AIR = w.ABSENT.join(pairs, ["key_s", "seq"], "left_semi")
    w.ABSENT = w.ABSENT.join(pairs, ["key_s", "seq"], "left_anti")


def _counts(w: _Work) -> None:
    """Per-key counts of every anomaly (one job; ``per_key``), the totals that are not per key (``tot``,
    ``hstats``) and the result's ``counts``."""
    tagged = [("duplicate", w.DUP), ("lost", w.LOST), ("unexpected", w.ABSENT), ("unexpected", w.MIS),
              ("aborted-input-read", w.AIR), ("nonmonotonic", w.BACK), ("input-duplicate", w.IDUP)]
    if w.H is not None:
        tagged += [("lost-write", w.LW), ("failed-write-visible", w.FV)]
    per_key_df = None
    for name, df in tagged:
        part = df.groupBy("key_s").count().select(F.lit(name).alias("a"), "key_s", "count")
        per_key_df = part if per_key_df is None else per_key_df.unionByName(part)
    w.per_key = per_key = {}
    for r in per_key_df.collect():
        d = per_key.setdefault(r["a"], {})
        d[r["key_s"]] = d.get(r["key_s"], 0) + int(r["count"])
    w.tot = tot = _totals(w.P, w.OA, w.inp0, w.h0)
    w.hstats = tot["history"]

    def total(name: str) -> int:
        return sum(per_key.get(name, {}).values())

    # lost-deleted: a run whose input a fault deleted is refused before Spark starts (checking/spark/checks.py)
    w.counts = {"lost": total("lost"), "lost-deleted": 0, "duplicate": total("duplicate"),
                "duplicate-records": tot["excess"] + tot["twice"],
                "unexpected": total("unexpected") + tot["bad"], "aborted-input-read": total("aborted-input-read"),
                "nonmonotonic": total("nonmonotonic"),
                "lost-write": total("lost-write"), "failed-write-visible": total("failed-write-visible"),
                "input-duplicate": total("input-duplicate"), "input-duplicate-records": tot["idup_rec"]}


def _examples(w: _Work) -> None:
    """The first rows of each anomaly, the copies of the first duplicated pairs and the input places of
    the first input duplicates (one job: ``ex``), then the output rows' own columns (one job: ``rows``)."""
    pos, keep_cols = w.pos, list(w.hstats["float_place"])
    top_dup = w.DUP.orderBy("first_out").limit(MAX).select("key_s", "seq")
    copy_n = F.row_number().over(Window.partitionBy("key_s", "seq").orderBy(pos.of()))
    top_idup = w.IDUP.orderBy("first_in").limit(MAX).select("key_s", "seq")
    history = {"lost-write": (w.LW, [ORD], ["key_s", "seq", *keep_cols]),
               "failed-write-visible": (w.FV, [ORD], ["key_s", "seq", *pos.unpack_place(F.col("last_place"), "lp"),
                                                       "error"])} if w.H is not None else {}
    if w.FAILED is not None:
        top_air = w.AIR.orderBy("first_out").limit(MAX).select("key_s", "seq")
        history["aborted-txn"] = (w.FAILED.join(top_air, ["key_s", "seq"]), [ORD], ["key_s", "seq", "txn", "error"],
                                  None)
    w.ex = ex = _first_rows(w.spark, {
        "copies": (w.OA.where("ok").join(top_dup, ["key_s", "seq"]).withColumn("n", copy_n)
                   .where(F.col("n") <= MAX), ["key_s", "seq", "n"], ["key_s", "seq", ORD], MAX * MAX),
        "places": (w.IA.join(top_idup, ["key_s", "seq"]), [pos.of()], ["key_s", "seq", "partition", "offset"], None),
        "lost": (w.LOST, [pos.of()], ["key_s", "seq", "partition", "offset"]),
        "duplicate": (w.DUP, ["first_out"], ["key_s", "seq"]),
        "absent": (w.ABSENT, ["first_out"], ["key_s", "seq", *pos.unpack(F.col("first_out"), "fo")]),
        "aborted": (w.AIR, ["first_out"], ["key_s", "seq", *pos.unpack(F.col("first_out"), "fo")]),
        "mismatch": (w.MIS, [pos.of()], ["key_s", "seq", ORD, "named_ord", "named_key", "named_seq"]),
        "bad": (w.BAD, [pos.of()], [ORD]),
        "nonmonotonic": (w.BACK, ["first_rank", "first_in"] if w.order == eo.ORDER_BY_RANK else ["first_out"],
                         ["key_s", "seq", "prev_seq", *pos.unpack(F.col("first_out"), "fo")]),
        "input-duplicate": (w.IDUP, ["first_in"], ["key_s", "seq"]),
        **history,
    })
    w.dup_pairs = [(r["key_s"], r["seq"]) for r in ex["duplicate"]]
    w.copies = copies = {p: [] for p in w.dup_pairs}
    for r in ex["copies"]:
        copies[(r["key_s"], r["seq"])].append(r[ORD])
    w.idup_pairs = [(r["key_s"], r["seq"]) for r in ex["input-duplicate"]]
    w.idup_places = {p: [] for p in w.idup_pairs}
    for r in ex["places"]:
        w.idup_places[(r["key_s"], r["seq"])].append((int(r["partition"]), int(r["offset"])))
    want = {r["fo_r"] for r in ex["absent"]} | {r["fo_r"] for r in ex["aborted"]} | {r[ORD] for r in ex["mismatch"]} | \
        {r[ORD] for r in ex["bad"]} | {r["fo_r"] for r in ex["nonmonotonic"]} | \
        {o for rows in copies.values() for o in rows}
    w.rows = _rows_by_order(w.out0, want)


def _anomalies(w: _Work) -> dict[str, list]:
    """The examples of every anomaly, built as the pandas checker builds them (:func:`_plain_record`)."""
    ex, prov, rows = w.ex, w.prov, w.rows

    def rec(o: int, cols: list[str], extra: dict) -> dict:
        row = rows[o]
        return _plain_record({c: extra[c] if c in extra else row.get(c) for c in cols})

    anomalies = {}
    anomalies["lost-deleted"] = []
    anomalies["lost"] = [{"key": r["key_s"], "seq": int(r["seq"]), "input_partition": int(r["partition"]),
                          "input_offset": int(r["offset"])} for r in ex["lost"]]
    anomalies["duplicate"] = [{"key": k, "seq": int(s), "copies": [rec(o, ["partition", "offset", *prov], {})
                                                                  for o in w.copies[(k, s)][:MAX]]}
                              for k, s in w.dup_pairs]
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
    txn = {}
    for r in reversed(ex.get("aborted-txn") or []):  # the first failed send of each pair, in history order
        txn[(r["key_s"], r["seq"])] = r
    anomalies["aborted-input-read"] = [
        rec(r["fo_r"], ["key", "seq", "partition", "offset", "input_txn", "input_outcome", *prov],
            {"key": r["key_s"], "seq": r["seq"], "input_txn": txn[(r["key_s"], r["seq"])]["txn"],
             "input_outcome": txn[(r["key_s"], r["seq"])]["error"]}) for r in ex["aborted"]]
    rank = [ORDER_RANK] if w.order != eo.ORDER_BY_POSITION else []
    anomalies["nonmonotonic"] = [rec(r["fo_r"], ["key", "seq", "prev_seq", "partition", "offset", *rank, *prov],
                                     {"key": r["key_s"], "seq": r["seq"], "prev_seq": int(r["prev_seq"])})
                                 for r in ex["nonmonotonic"]]
    anomalies.update(_history_anomalies(w))
    anomalies["input-duplicate"] = []
    for k, s in w.idup_pairs:
        pl = sorted(w.idup_places[(k, s)])
        anomalies["input-duplicate"].append({"key": k, "seq": int(s), "input_partition": pl[-1][0],
                                             "input_offset": pl[-1][1],
                                             "inputs": [{"partition": p, "offset": o} for p, o in pl]})
    return anomalies


def _history_anomalies(w: _Work) -> dict[str, list]:
    """lost-write and failed-write-visible examples (both empty without a history)."""
    if w.H is None:
        return {"lost-write": [], "failed-write-visible": []}
    ex, fl = w.ex, w.hstats["float_place"]
    keep_cols = list(fl)
    lw = [_plain_record({"key": r["key_s"], "seq": int(r["seq"]), **{n: _place_value(r[n], fl[n]) for n in keep_cols}})
          for r in ex["lost-write"]]
    fv = [{"key": r["key_s"], "seq": int(r["seq"]),
           **({"input_partition": int(r["lp_p"]), "input_offset": int(r["lp_o"])} if r["lp_p"] is not None else {}),
           **({"error": r["error"]} if r["error"] is not None else {})} for r in ex["failed-write-visible"]]
    return {"lost-write": lw, "failed-write-visible": fv}


_ORDER = ("lost", "lost-deleted", "duplicate", "unexpected", "aborted-input-read", "nonmonotonic", "lost-write",
          "failed-write-visible", "input-duplicate")


def _key_plain(df):
    """``str(key)`` of a history column read from JSON (object dtype in pandas: a missing key reads
    ``None``)."""
    return F.coalesce(_c(df, "key", "string"), F.lit("None"))


def _history_agg(h0):
    """One row over the history: sends by outcome, all sends, ops holding ``partition`` / ``offset``,
    all ops (read by :func:`_history_stats`)."""
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
    if not orders:
        return {}
    got = df.where(F.col(ORD).isin(sorted(orders))).collect()
    return {r[ORD]: r.asDict() for r in got}


def _per_key_series(d: dict[str, int]):
    """What ``exactly_once._per_key`` gives: counts indexed by key (str), sorted by key."""
    return pd.Series(list(d.values()), index=pd.Index(list(d.keys()), dtype=object, name="key"),
                     dtype="int64").sort_index()
