"""A table's rows as the checker's output frame: what a sink that writes a table (PostgreSQL, Delta Lake,
Apache Iceberg) gives the exactly-once checker in place of a topic's decoded records.

A row keeps its record's identity, ``key`` and ``seq`` (``docs/pipeline-contract.md``); the other columns
are optional: ``id`` (the rows' order), ``in_partition``/``in_offset``/``in_ts`` (where the record was
read, when) and ``batch_id``/``incarnation`` (the bundled sinks' provenance).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from onceproof.pipeline import provenance
from onceproof.sinks.base import ORDER_RANK, OutputError

VALUE_COLUMNS = ("key", "seq", "in_partition", "in_offset", "in_ts")
"""Columns read into the record's value when the table has them (``key`` and ``seq`` it must have)."""
PROVENANCE = {"batch_id": provenance.BATCH, "incarnation": provenance.INCARNATION}
"""Columns read as provenance when present (the bundled sinks write them; a user's table may not)."""
COLUMNS = ("id", *VALUE_COLUMNS, *PROVENANCE)
"""Every column a reader takes from a table, in order, when the table has it."""
TYPES = {"id": pa.int64(), "key": pa.string(), "seq": pa.int64(), "in_partition": pa.int64(),
         "in_offset": pa.int64(), "in_ts": pa.int64(), "batch_id": pa.string(), "incarnation": pa.string()}
"""The Arrow type each of :data:`COLUMNS` is read as."""


def rank_column(rank: np.ndarray) -> pd.arrays.IntegerArray:
    """int64 order ranks (negative = none) as the nullable :data:`~onceproof.sinks.base.ORDER_RANK`
    column of an output frame: NA where a rank is negative."""
    r = np.asarray(rank, dtype=np.int64)
    return pd.arrays.IntegerArray(np.maximum(r, 0), r < 0)


def check_columns(have: set[str], order_column: str, table: str, output: str) -> None:
    """Refuse a table whose columns ``have`` lack ``key`` or ``seq`` or the declared ``order_column``
    (``--order-column``; "" = none). ``table`` names it in the message ("Delta table /x"), ``output`` is
    its ``--output`` (the contract section the message points to).

    Raises: :class:`~onceproof.sinks.base.OutputError` naming the missing columns and the fix."""
    missing = [c for c in ("key", "seq") if c not in have]
    if missing:
        raise OutputError(f"{table} has no column {' or '.join(missing)}: each row must keep its record's key and "
                          f"seq (docs/pipeline-contract.md, --output {output})")
    if order_column and order_column not in have:
        raise OutputError(f"{table} has no column {order_column} (--order-column): name one of "
                          f"{', '.join(sorted(have))}")


def as_rank(col: pa.ChunkedArray) -> np.ndarray:
    """A declared order column (``--order-column``) as int64 ranks: integers as they are, timestamps and
    dates as epoch microseconds, nulls as -1 (no rank)."""
    t = col.type
    if pa.types.is_timestamp(t):
        col = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_date(t):
        col = col.cast(pa.timestamp("us")).cast(pa.int64())
    else:
        col = col.cast(pa.int64())
    return col.fill_null(-1).to_numpy().astype(np.int64)


def frame(table: pa.Table, rank: np.ndarray | None = None) -> pd.DataFrame:
    """A read of a table (``key``, ``seq``, and any other of :data:`COLUMNS`) as the checker's output
    frame, as a Kafka record's decoded JSON value would give it: ``partition`` 0 and ``offset`` = ``id``
    (else the row's position in the read), ``key`` (string), ``seq`` (Int64, NA when null), the other
    value columns (int64, Int64 with nulls), ``op.input`` = ``"<in_partition>:<in_offset>"``, and
    ``batch_id``/``incarnation`` as the provenance (strings) a Kafka record's headers give.

    The order: ``id`` is the rows' order when the table has one. Without it the row's position in the
    read is no order a user can read (``ctid``, a scan), so the frame gets an
    :data:`~onceproof.sinks.base.ORDER_RANK` column: ``rank`` (one int64 per row: the Delta commit
    version that added it, say; negative = NA) when given, else all NA (no order: the per-key order is
    not judged).

    Raises ``KeyError`` when ``key`` or ``seq`` is missing (readers check the table's columns first),
    ``ValueError`` when ``rank`` has another length than the table."""
    n, cols = table.num_rows, table.column_names
    if rank is not None and len(rank) != n:
        raise ValueError(f"rank has {len(rank)} values for {n} rows")
    out = pd.DataFrame({"partition": np.zeros(n, dtype=np.int32),
                        "offset": (table["id"].to_numpy(zero_copy_only=False).astype(np.int64) if "id" in cols
                                   else np.arange(n, dtype=np.int64)),
                        "key": table["key"].to_pandas().astype("string"),
                        "seq": table["seq"].to_pandas().astype("Int64")})
    if "id" not in cols:
        out[ORDER_RANK] = rank_column(np.full(n, -1, np.int64) if rank is None else rank)
    for c in VALUE_COLUMNS[2:]:
        if c in cols:
            v = table[c].to_pandas()
            out[c] = v.astype("int64") if not v.isna().any() else v.astype("Int64")
    if {"in_partition", "in_offset"} <= set(cols):
        ref = out["in_partition"].astype("string") + ":" + out["in_offset"].astype("string")
        out[provenance.INPUT] = ref.astype(object).where(ref.notna(), None)
    for col, name in PROVENANCE.items():
        if col in cols:
            v = table[col].to_pandas().astype("string")
            out[name] = v.astype(object).where(v.notna(), None)
    return out
