"""The eos sink refuses a micro-batch whose input arrived incomplete (pipeline/completeness.py): the
guard added after `--nemesis all --seed 7` lost 209 records of an empty-read partition."""

import pytest

from onceproof.pipeline import completeness


def _offsets(ckpt, batch, ends):
    (ckpt / "offsets").mkdir(parents=True, exist_ok=True)
    (ckpt / "offsets" / str(batch)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n' + '{"input":' + str(
            {str(p): o for p, o in ends.items()}).replace("'", '"') + "}\n")


def test_expected_ranges_come_from_the_offset_log(tmp_path):
    _offsets(tmp_path, 72, {0: 100, 4: 23015, 5: 50})
    _offsets(tmp_path, 73, {0: 100, 4: 23224, 5: 60})
    assert completeness.expected_ranges(tmp_path, 73, "input") == {4: (23015, 23224), 5: (50, 60)}
    assert completeness.expected_ranges(tmp_path, 0, "input") is None  # no previous batch
    assert completeness.expected_ranges(tmp_path, 74, "input") is None  # not logged
    assert completeness.expected_ranges(tmp_path, 73, "other-topic") is None


def test_the_seen_case_an_empty_partition_is_a_shortfall():
    exp = {4: (23015, 23224), 5: (50, 60)}
    assert completeness.shortfalls(exp, {5: 10}) == ["input partition 4: 0 rows for offsets [23015, 23224) "
                                                     "(209 planned)"]
    assert completeness.shortfalls(exp, {4: 209, 5: 10}) == []
    assert completeness.shortfalls(exp, {4: 209, 5: 11, 2: 3}) == [
        "input partition 5: 11 rows for offsets [50, 60) (10 planned)", "input partition 2: 3 rows, none planned"]


@pytest.mark.cluster
def test_verify_on_a_real_spark_frame(tmp_path):
    """The Spark side (cache, groupBy count, collect) against a real local Spark."""
    from pyspark.sql import SparkSession

    _offsets(tmp_path, 1, {0: 10, 1: 5})
    _offsets(tmp_path, 2, {0: 13, 1: 7})
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        full = spark.createDataFrame([(0, o) for o in range(10, 13)] + [(1, 5), (1, 6)], "in_partition int, in_offset long")
        assert completeness.verify(full, tmp_path, 2, "input") == 2
        short = full.where("in_partition = 0")  # partition 1's two rows never arrived
        with pytest.raises(completeness.IncompleteBatch, match=r"input partition 1: 0 rows for offsets \[5, 7\)"):
            completeness.verify(short, tmp_path, 2, "input")
        assert completeness.verify(full, tmp_path, 0, "input") is None
    finally:
        spark.stop()
