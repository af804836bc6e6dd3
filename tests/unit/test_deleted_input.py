"""Input deleted before the query read it (``delete-input-records``), on synthetic frames: the checker owes
the deleted records again (rebuilt from the history's ok sends at the deleted offsets) and reports their
loss as ``lost-deleted``, never mixed with ``lost``."""

from __future__ import annotations

import pandas as pd

from onceproof.checkers.exactly_once import check
from onceproof.checking.checks import with_deleted_input
from onceproof.nemesis.delete_records import deleted_ranges


def _frames():
    full = pd.DataFrame({"key": "k0", "seq": range(10), "partition": 0, "offset": range(10)})
    hist = full.assign(type="ok", f="send")
    nemesis = pd.DataFrame([
        {"type": "invoke", "f": "delete-input-records"},
        {"type": "info", "f": "delete-input-records", "outcome": "effective",
         "evidence": {"partition": 0, "deleted_unread": [4, 8], "log_start_before": 0, "log_start_after": 8}}])
    return full, hist, nemesis


def test_deleted_records_are_owed_again_and_their_loss_is_lost_deleted():
    full, hist, nemesis = _frames()
    assert deleted_ranges(nemesis.to_dict("records")) == [(0, 0, 8)]
    read = full[full["offset"] >= 8]  # the log start moved to 8: offsets 0-7 are gone from a later read
    out = full[full["offset"].isin([0, 1, 2, 3, 4, 5, 8, 9])].assign(partition=0)  # it read 0-5, skipped 6, 7
    out = out.assign(offset=range(len(out)))
    inp, n = with_deleted_input(read, hist, nemesis)
    assert n == 8 and len(inp) == 10, inp  # every deleted record is owed, read by the query or not
    r = check(hist, inp, out)
    assert r["counts"]["lost-deleted"] == 2 and r["counts"]["lost"] == 0, r["counts"]
    assert r["counts"]["lost-write"] == 0 and r["verdict"] == "invalid"
    ex = r["anomalies"]["lost-deleted"][0]
    assert (ex["seq"], ex["input_offset"]) == (6, 6) and "[0, 8)" in ex["deleted_by"], ex
    # a record lost some other way stays lost
    r = check(hist, inp, out[out["seq"] != 9])
    assert r["counts"]["lost"] == 1 and r["counts"]["lost-deleted"] == 2, r["counts"]


def test_without_a_deletion_the_input_is_untouched():
    full, hist, _ = _frames()
    inp, n = with_deleted_input(full, hist, pd.DataFrame([{"type": "info", "f": "kill-driver",
                                                           "outcome": "effective", "evidence": {}}]))
    assert n == 0 and inp is full


def test_the_newest_drivers_query_failure_is_quoted(tmp_path):
    from onceproof.checking.recovery import query_failure

    assert query_failure(tmp_path) is None
    (tmp_path / "driver-1.log").write_text("starting\n")
    assert query_failure(tmp_path) is None
    (tmp_path / "driver-2.log").write_text(
        "26/11/28 WARN x\npyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query "
        "terminated with exception: Cannot fetch offset 120. Some data may have been lost because they are not "
        "available in Kafka any more\n")
    (tmp_path / "driver-10.log").write_text("")  # the newest by number, not by name: still starting
    assert "Some data may have been lost" in query_failure(tmp_path) and query_failure(tmp_path).endswith(
        "(driver-2.log)")
    (tmp_path / "driver-10.log").write_text("x.y.SinkError: fenced\n")
    assert query_failure(tmp_path) == "x.y.SinkError: fenced (driver-10.log)"


def test_a_kafka_data_loss_line_is_quoted_before_the_wrapper(tmp_path):
    from onceproof.checking.recovery import query_failure

    (tmp_path / "driver-1.log").write_text(
        "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query terminated\n"
        "org.apache.spark.SparkIllegalStateException: [KAFKA_DATA_LOSS.START_OFFSET_RESET] Some data may have "
        "been lost because they are not available in Kafka any more\n")
    assert "KAFKA_DATA_LOSS" in query_failure(tmp_path)
