"""The cluster half of ``tests/unit/test_completeness.py``: tests that need a local cluster or Spark."""

from __future__ import annotations

import pytest

from onceproof.pipeline import completeness
from tests.unit.test_completeness import _offsets  # noqa: F401 (fixtures are used by name)


@pytest.mark.cluster
def test_verify_on_a_real_spark_frame(tmp_path):
    """The Spark side (cache, groupBy count, collect) against a real local Spark."""
    from pyspark.sql import SparkSession

    _offsets(tmp_path, 1, {0: 10, 1: 5})
    _offsets(tmp_path, 2, {0: 13, 1: 7})
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        rows = [(0, o) for o in range(10, 13)] + [(1, 5), (1, 6)]
        full = spark.createDataFrame(rows, "in_partition int, in_offset long")
        guard = completeness.Guard(str(tmp_path), "input")
        assert completeness.verify(full, guard, 2) == 2
        short = full.where("in_partition = 0")  # partition 1's two rows never arrived
        with pytest.raises(completeness.IncompleteBatch, match=r"input partition 1: 0 rows for offsets \[5, 7\)"):
            completeness.verify(short, guard, 2)
        assert completeness.verify(full, guard, 0) is None
    finally:
        spark.stop()


