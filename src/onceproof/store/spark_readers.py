"""A run's large files as Spark DataFrames, in the row order :mod:`onceproof.store.readers` gives them.

The Spark engine (``checking/spark/checks.py``) reads the two files that grow with a run's length,
the topic snapshots (``input.parquet``, ``output.parquet``, ``output_uncommitted.parquet``,
``live.parquet``) and ``history.jsonl``, through these readers; the small ones (``test.json``,
``recovery.json``, ``sink.jsonl``, ``nemesis.jsonl``) stay with :mod:`onceproof.store.readers`.

Every frame carries :data:`ORD`, a ``long`` unique within the frame whose order is the row order
pandas reads: a checker that breaks ties by row position (``checkers/exactly_once.py`` does, between
records at the same partition and offset) makes the same choice on either engine.

* Parquet: ``_metadata.row_index`` (Spark 3.5+), the row's position in its file. A snapshot written by
  pandas is one file; one written by Spark (``checking/spark/checks.py``'s live check) is a directory of
  part files, which pyarrow reads in file-name order, so there ``ORD`` is ``file rank << 40 | row``.
* ``history.jsonl`` (or ``.gz``): ``monotonically_increasing_id()`` over the text source, which is file
  order: Spark's file scan splits one file into partitions in offset order (``FilePartition`` packs the
  splits, sorted stably by length, so a file's equal-sized splits keep their order and the shorter last
  split comes last) and the id is ``partition << 33 | row in partition``.

The history follows :func:`onceproof.store.readers.read_history`'s rules: a torn **last** line is dropped and
described in ``problems``; a bad line before it raises :class:`onceproof.store.readers.DamagedFile` naming
``file:line``; blank lines are skipped.
"""

from __future__ import annotations

from pathlib import Path

from onceproof.store.readers import DamagedFile
from onceproof.store.runfiles import RunFiles, stored

ORD = "_ord"
"""Row-order column added to every frame (long, unique within the frame)."""

_FILE_BITS = 40  # rows per part file < 2**40

HISTORY_FIELDS = ("type", "f", "key", "seq", "partition", "offset", "error", "txn")
"""The history fields the checkers read; each is parsed as a string (a number keeps its JSON text, so
``str()`` of pandas' value and Spark's agree), absent fields are null."""


def parquet(spark, path: Path):
    """``path`` (a parquet file, or a directory of part files) as a DataFrame with :data:`ORD`; ``None``
    when it does not exist.

    Raises: :class:`DamagedFile` naming the path when Spark cannot read its schema (not parquet, empty,
    truncated footer). Damage inside a data page surfaces later, when a job reads it.
    """
    from pyspark.sql import functions as F

    if not path.exists():
        return None
    try:
        df = spark.read.parquet(str(path))
        files = df.inputFiles()
    except Exception as e:  # noqa: BLE001 - Spark raises AnalysisException, Py4JJavaError, ...
        raise DamagedFile(f"{path} is not a readable parquet file ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})") from e
    row = F.col("_metadata.row_index")
    if len(files) <= 1:
        return df.withColumn(ORD, row)
    # part files in the order pyarrow reads a directory: by path
    names = sorted(r[0] for r in df.select(F.col("_metadata.file_path")).distinct().collect())
    rank = F.array_position(F.array(*[F.lit(n) for n in names]), F.col("_metadata.file_path"))
    return df.withColumn(ORD, F.shiftleft(rank.cast("long"), _FILE_BITS) + row)


def input(spark, run_dir: Path):
    """``input.parquet`` (see :func:`onceproof.store.readers.read_input`), or ``None``."""
    return parquet(spark, RunFiles(run_dir).input)


def output(spark, run_dir: Path):
    """``output.parquet`` (see :func:`onceproof.store.readers.read_output`), or ``None``."""
    return parquet(spark, RunFiles(run_dir).output)


def output_uncommitted(spark, run_dir: Path):
    """``output_uncommitted.parquet``, or ``None``."""
    return parquet(spark, RunFiles(run_dir).output_uncommitted)


def live(spark, run_dir: Path):
    """``live.parquet`` (the during-faults reader's view), or ``None``."""
    return parquet(spark, RunFiles(run_dir).live)


def history(spark, run_dir: Path, problems: list[str] | None = None):
    """``history.jsonl`` (or its ``.gz``) as a DataFrame of :data:`HISTORY_FIELDS` (strings, null when a
    line lacks one) plus :data:`ORD` (file order); ``None`` when the file is absent.

    Raises: :class:`DamagedFile` naming ``file:line`` for a line before the last that is not a JSON
    object. A torn last line is dropped and described in ``problems`` (one string).

    The parsed lines are persisted (memory, then disk) for the session's life, or until the caller
    unpersists the frame's source (``spark.catalog.clearCache()`` releases everything).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    path = stored(RunFiles(run_dir).history)
    if not path.exists():
        return None
    schema = T.StructType([T.StructField(n, T.StringType()) for n in HISTORY_FIELDS]
                          + [T.StructField("_corrupt", T.StringType())])
    lines = spark.read.text(str(path)).withColumn(ORD, F.monotonically_increasing_id())
    j = F.from_json("value", schema, {"columnNameOfCorruptRecord": "_corrupt"})
    # the JSON in its own projection (referencing it per field in one projection parsed each line up to
    # 9 times: 6.9 s against 4.4 s for 1 M lines), and parsed once: the checks read the history several
    # times (a 50 M-send history is ~4.4 GB of JSON)
    t, jc = F.col("_t"), F.col("j")
    bad = (t != "") & (jc.isNull() | jc["_corrupt"].isNotNull() | ~t.startswith("{"))
    parsed = lines.select(ORD, F.trim("value").alias("_t"), j.alias("j")).select(
        ORD, (t == "").alias("_blank"), bad.alias("_bad"),
        *[jc[n].alias(n) for n in HISTORY_FIELDS]).persist(StorageLevel.MEMORY_AND_DISK)
    st = parsed.agg(F.count(F.lit(1)).alias("n"), F.max(ORD).alias("last"),
                    F.min(F.when(F.col("_bad"), F.col(ORD))).alias("first_bad"),
                    F.sum(F.col("_bad").cast("int")).alias("n_bad")).first()
    keep = parsed.where(~F.col("_blank"))
    if st["n_bad"]:
        if st["first_bad"] != st["last"]:
            parsed.unpersist()
            line = lines.where(F.col(ORD) <= st["first_bad"]).count()
            raise DamagedFile(f"{path}:{line} is not a JSON object; the file is corrupt")
        msg = f"{path}: dropped a torn last line ({st['n']})"
        if problems is not None:
            problems.append(msg)
        keep = keep.where(F.col(ORD) != st["last"])
    return keep.select(*HISTORY_FIELDS, ORD)
