"""The keyed workload's output value as table columns, for the sinks that write one column per field (the
file sink's JSON lines, the PostgreSQL and Delta tables): the keyed transform emits ``value`` as JSON
(``workloads/keyed.py``), and these sinks unpack it.
"""

from __future__ import annotations

COLUMNS = ("key", "seq", "in_partition", "in_offset", "in_ts")
"""The fields of the keyed transform's JSON ``value``, in order."""
VALUE_SCHEMA = "key STRING, seq LONG, in_partition LONG, in_offset LONG, in_ts LONG"
""":data:`COLUMNS` as a Spark DDL schema, for ``from_json``."""


def rows_of(df):
    """The keyed transform's frame (``value`` JSON) as one column per field (:data:`COLUMNS`)."""
    # pyspark: only where Spark runs; the harness imports the sinks' modules for their names only
    from pyspark.sql import functions as F

    v = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    return df.select(v.alias("v")).select(*(f"v.{c}" for c in COLUMNS))
