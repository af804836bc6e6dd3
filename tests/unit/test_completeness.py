"""The eos sink refuses a micro-batch whose input arrived incomplete (pipeline/completeness.py): the
guard added after `--nemesis all --seed 7` lost 209 records of an empty-read partition."""


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




def test_a_partition_added_mid_run_is_held_to_its_end_offset_only(tmp_path):
    """Batch 3 is the first to name input partition 6 (the topic grew): Spark reads it from its earliest
    offset, which the log does not say. Seen for real: the guard refused that batch ("135 rows, none
    planned") and the query failed on every restart."""
    _offsets(tmp_path, 2, {0: 100, 5: 50})
    _offsets(tmp_path, 3, {0: 110, 5: 50, 6: 135, 7: 0})
    exp = completeness.expected_ranges(tmp_path, 3, "input")
    assert exp == {0: (100, 110), 6: (None, 135)}  # 7 is new but empty
    assert completeness.shortfalls(exp, {0: 10, 6: 135}) == []
    assert completeness.shortfalls(exp, {0: 10, 6: 140}) == [
        "input partition 6 (new): 140 rows, more than its end offset 135"]


def test_a_transactional_inputs_ranges_are_held_to_what_its_reader_counts():
    """Commit markers and aborted records take offsets a read_committed reader never sees: the planned
    rows are the second reader's count, not ``until - from``; a row short of that count is refused."""
    exp = {0: (100, 160), 1: (40, 52)}
    planned = {0: 48, 1: 11}  # 12 offsets of partition 0 are markers or aborted, 1 of partition 1 a marker
    assert completeness.shortfalls(exp, {0: 48, 1: 11}, planned) == []
    assert completeness.shortfalls(exp, {0: 47, 1: 11}, planned) == [
        "input partition 0: 47 rows for offsets [100, 160) (48 planned)"]
    assert completeness.shortfalls(exp, {0: 60, 1: 12}) == []  # contiguous: every offset a record
