"""The transaction-level checks (``checkers/transactions.py``, composed by ``checkers/compose.py``) with
the big frames in Spark.

What each check means, and its sources (KIP-98, KIP-447, Jepsen's G1a), is ``checkers/transactions.py``'s
docstring. Each check looks at few rows of a large frame, so Spark picks the rows that can matter and
the pandas functions judge them. Counts, examples and the verdict are therefore equal by construction,
and ``compose.combine`` stays the one place where the verdict is composed:

* ``aborted-read``: a record can only be an aborted read if its ``op.batch`` / ``op.sink_partition`` /
  ``op.attempt`` headers convert (``pd.to_numeric``, as ``transactions._attempt_rows`` does) to those of an
  attempt ``sink.jsonl`` shows aborted. The distinct header values (one per batch, sink partition,
  attempt: small) are converted in pandas, Spark keeps the rows holding such values, and
  ``transactions.aborted_reads`` judges those rows (incarnations included) in their row order.
* ``aborted_hidden`` (a statistic): uncommitted records whose (partition, offset) the committed read
  lacks, one anti-join.
* the live reader (``live.parquet``): its distinct output positions (the first sighting: smallest
  ``seen_ms``, then row order), the rows of (key, input record) groups held at two or more positions, and
  the aborted-read candidates among them, go to ``transactions.live_view``. The numbers that need
  every row are computed here: ``live_records``, ``live_rereads`` and ``visibility_latency_ms``. The
  p50/p99 come from Spark's exact ``percentile`` (linear interpolation, as pandas' ``quantile``); the
  last bits of a float can differ from numpy's.
* ``stuck`` and the attempt statistics need only ``recovery.json`` and ``sink.jsonl``: as in pandas.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from onceproof.checkers import compose, transactions
from onceproof.checking.spark.engine import columns
from onceproof.store.spark_readers import ORD

_HEADERS = {"op.batch": "batch", "op.sink_partition": "sink_partition", "op.attempt": "attempt"}


def _col(name: str):
    return F.col(f"`{name}`")


def combine(base: dict, *, output, sink_log: pd.DataFrame | None = None, uncommitted=None, live=None,
            lso: dict[int, int] | None = None, hw: dict[int, int] | None = None, live_check: dict | None = None,
            strict: bool = False) -> dict:
    """``compose.combine`` for Spark frames (``output``, ``uncommitted``, ``live``: DataFrames with
    :data:`onceproof.store.spark_readers.ORD`, or ``None``): the same result, stats included.
    ``live_check`` and ``strict``: as ``compose.combine`` takes them."""
    sink_log = sink_log if sink_log is not None else pd.DataFrame()
    out_rows = aborted_candidates(output, sink_log)
    live_rows, live_stats = (None, None) if live is None else live_reduce(live, sink_log)
    r = compose.combine(base, output=out_rows, sink_log=sink_log, uncommitted=None, live=live_rows, lso=lso, hw=hw,
                        live_check=live_check, strict=strict)
    stats = r["stats"]
    stats["aborted_hidden"] = hidden_aborted(uncommitted, output)
    if live_stats is not None:
        stats.update(live_stats)
    return r


def aborted_candidates(frame, sink_log: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (all columns, in :data:`ORD` order, without it) that can belong to an attempt
    ``sink_log`` shows aborted: a superset of ``transactions.aborted_reads``' hits, so that function gives
    on them the count and examples it gives on the whole frame. Empty (same columns) when none can."""
    cols = [_col(c) for c in columns(frame) if c != ORD]
    cond = candidate_filter(frame, sink_log)
    if cond is None:
        return to_pandas(frame.limit(0).select(*cols))
    return to_pandas(frame.where(cond).orderBy(ORD).select(*cols))


def candidate_filter(frame, sink_log: pd.DataFrame):
    """A Spark condition true for the rows of ``frame`` whose ``op.batch`` / ``op.sink_partition`` /
    ``op.attempt`` convert as ``transactions._attempt_rows`` converts them (the batch with
    ``pd.to_numeric`` as float; the others to_numeric, then int64) to those of an aborted attempt;
    ``None`` when no row can (no such headers, no aborted attempt, or no row holds such values). One
    small job: the distinct values of the three headers."""
    if sink_log is None or sink_log.empty or not set(_HEADERS) <= set(columns(frame)):
        return None
    ab = transactions.aborted_attempts(sink_log, by_incarnation=transactions.INCARNATION in columns(frame))
    if ab.empty:
        return None
    want = {"op.batch": list(ab["batch"].astype(float)),
            "op.sink_partition": list(ab["sink_partition"].astype("int64")),
            "op.attempt": list(ab["attempt"].astype("int64"))}
    distinct = frame.select(*[F.collect_set(_col(c)).alias(c) for c in _HEADERS]).first()
    cond = F.lit(True)
    for c in _HEADERS:
        vals = pd.Series(list(distinct[c]), dtype=object)
        num = pd.to_numeric(vals, errors="coerce")
        if c == "op.batch":
            hit = num.isin(want[c])
        else:
            ok = num.notna()
            hit = pd.Series(False, index=vals.index)
            hit[ok] = num[ok].astype("int64").isin(want[c]).to_numpy()
        keep = vals[hit].tolist()
        if not keep:
            return None
        cond = cond & _col(c).isin(keep)
    return cond


def hidden_aborted(uncommitted, committed) -> int:
    """``transactions.hidden_aborted`` on Spark frames: uncommitted records (each row) whose (partition,
    offset) no committed record has."""
    if uncommitted is None:
        return 0
    u = uncommitted.select(_col("partition").cast("long").alias("p"), _col("offset").cast("long").alias("o"))
    c = committed.select(_col("partition").cast("long").alias("p"), _col("offset").cast("long").alias("o")).distinct()
    return int(u.join(c, ["p", "o"], "left_anti").count())


def live_reduce(live, sink_log: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """``(rows, stats)``: the live reader's rows ``transactions.live_view`` needs (distinct positions that
    are live duplicates or aborted-read candidates, in row order) and ``{"live_records", "live_rereads",
    "visibility_latency_ms"}`` over all of them."""

    cols = [c for c in columns(live) if c != ORD]
    if {"partition", "offset"} <= set(columns(live)):
        seen = _col("seen_ms").try_cast("double") if "seen_ms" in columns(live) else F.lit(None).cast("double")
        first = Window.partitionBy(_col("partition"), _col("offset")).orderBy(seen.asc_nulls_last(), F.col(ORD))
        uniq = live.withColumn("_n", F.row_number().over(first)).where(F.col("_n") == 1).drop("_n")
    else:
        uniq = live
    uniq = uniq.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        stats = _latency(uniq, live)
        n_uniq, n_all = stats.pop("_n"), stats.pop("_all")
        ok = uniq.where(_col("seq").isNotNull()) if "seq" in columns(uniq) else uniq.limit(0)
        ident = _col("seq").cast("string")
        if "op.input" in columns(uniq):
            ident = F.coalesce(_col("op.input").cast("string"), F.concat(F.lit("seq:"), ident))
        ok = ok.withColumn("_ident", ident)
        key = _col("key") if "key" in columns(uniq) else F.lit(None).cast("string")
        groups = ok.groupBy(key.alias("_k"), F.col("_ident").alias("_gi")).count().where(F.col("count") > 1)
        dups = ok.join(groups, key.eqNullSafe(F.col("_k")) & (F.col("_ident") == F.col("_gi")), "left_semi")
        picked = dups.select(*[_col(c) for c in cols], ORD)
        cond = candidate_filter(uniq, sink_log)
        if cond is not None:
            picked = picked.unionByName(uniq.where(cond).select(*[_col(c) for c in cols], ORD)).dropDuplicates([ORD])
        rows = to_pandas(picked.orderBy(ORD)).drop(columns=[ORD])
    finally:
        uniq.unpersist()
    return rows, {"live_records": int(n_uniq), "live_rereads": int(n_all - n_uniq), "visibility_latency_ms": stats}


def _latency(uniq, live) -> dict:
    """``{"p50", "p99", "max", "n"}`` of ``seen_ms - in_ts`` (ms) over ``uniq`` (none of them when no row
    has both), plus ``_n``: the rows of ``uniq``, and ``_all``: the rows of ``live`` (one job)."""
    aggs = [F.count(F.lit(1)).alias("_n")]
    both = {"seen_ms", "in_ts"} <= set(columns(uniq))
    if both:
        lat = _col("seen_ms").try_cast("double") - _col("in_ts").try_cast("double")
        aggs += [F.count(lat).alias("n"), F.percentile(lat, F.array(F.lit(0.5), F.lit(0.99))).alias("q"),
                 F.max(lat).alias("max")]
    r = uniq.agg(*aggs).crossJoin(live.agg(F.count(F.lit(1)).alias("_all"))).first()
    if not both or not r["n"]:
        return {"_n": r["_n"], "_all": r["_all"]}
    return {"p50": float(r["q"][0]), "p99": float(r["q"][1]), "max": float(r["max"]), "n": int(r["n"]),
            "_n": r["_n"], "_all": r["_all"]}


def to_pandas(df) -> pd.DataFrame:
    """A small Spark frame as pandas with the dtypes pandas reads from our parquet snapshots: integral
    columns as ``int64`` (``Int64`` when they hold nulls), strings as object. No Arrow: a few rows."""

    rows = df.collect()
    out = {}
    for f in df.schema.fields:
        vals = [r[f.name] for r in rows]
        if isinstance(f.dataType, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
            out[f.name] = pd.array(vals, dtype="Int64") if any(v is None for v in vals) else \
                np.asarray(vals, dtype=np.int64)
        elif isinstance(f.dataType, (T.DoubleType, T.FloatType)):
            out[f.name] = np.asarray([np.nan if v is None else v for v in vals], dtype=float)
        else:
            out[f.name] = pd.Series(vals, dtype=object)
    return pd.DataFrame(out, columns=[f.name for f in df.schema.fields])
