"""sinks/file_log.py: the committed view of a Spark file sink's output through ``_spark_metadata``
(plain deltas, a .compact then deltas, stale superseded files, "delete" entries, orphans, percent-encoded
``file:`` URIs, torn / empty / headerless / newer-version log files, a missing log, missing data files,
a container path remap) and the frames it feeds the exactly-once checker. Synthetic directories in the
exact byte format a real Spark 4.3.0 ``local[1]`` run wrote (``REAL_ENTRY`` below is one of its lines)."""

import gzip
import json
import os
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import pytest

from onceproof.checkers import exactly_once
from onceproof.sinks import file_log as fsl
from onceproof.sinks.file_log import FileSinkLogError

# A line from _spark_metadata/10 of a real run (pyspark 4.3.0, local[1], writeStream.format("json") into
# "/tmp/i9b_spark/w/out dir%x", trigger availableNow): file:/// (three slashes), space -> %20, % -> %25,
# fields in SinkFileStatus order. The log files had no trailing newline; an empty batch file is "v1".
REAL_ENTRY = ('{"path":"file:///tmp/i9b_spark/w/out%20dir%25x/part-00000-4b42b4d8-a947-477d-9291-5f95b5a3591c'
              '-c000.json","size":162,"isDir":false,"modificationTime":1795399178336,"blockReplication":1,'
              '"blockSize":33554432,"action":"add"}')


def uri(p: Path, slashes: str = "///") -> str:
    """What Spark stores for a local file (Hadoop Path.toUri.toString: reserved characters escaped)."""
    return "file:" + slashes.removesuffix("/") + quote(str(p), safe="/=:@")


def entry(p, action="add", size=None, is_dir=False):
    path = p if isinstance(p, str) else uri(p)
    if size is None:
        size = p.stat().st_size if isinstance(p, Path) and p.exists() else 0
    return {"path": path, "size": size, "isDir": is_dir, "modificationTime": 1795399178336,
            "blockReplication": 1, "blockSize": 33554432, "action": action}


def write_log(out: Path, name: str, entries, header: str = "v1", trailing: str = "") -> Path:
    """``out/_spark_metadata/<name>`` as CompactibleFileStreamLog.serialize writes it."""
    meta = out / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    # json4s writes non-ASCII characters raw, as UTF-8
    lines = [e if isinstance(e, str) else json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in entries]
    body = header + "".join("\n" + ln for ln in lines) + trailing
    (meta / name).write_text(body)
    return meta / name


def data_file(out: Path, name: str, records, extra: str = "") -> Path:
    """A JSON-lines data file as Spark's json writer writes it (one object per line, "\\n" after each)."""
    p = out / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records) + extra)
    return p


def rec(key, seq, part=0, off=None):
    return {"key": key, "seq": seq, "in_partition": part, "in_offset": seq if off is None else off}


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


def names(paths):
    return [p.name for p in paths]


# ------------------------------------------------------------------------------------------ the log


def test_plain_deltas_in_commit_order(out):
    # names sort the other way round from the commit order: the order must come from the log
    f0 = data_file(out, "part-00000-ccc-c000.json", [rec("a", 0), rec("a", 1)])
    f1 = data_file(out, "part-00000-bbb-c000.json", [rec("a", 2)])
    f2 = data_file(out, "part-00000-aaa-c000.json", [rec("a", 3)])
    write_log(out, "0", [entry(f0)])
    write_log(out, "1", [entry(f1)])
    write_log(out, "2", [entry(f2)])
    assert fsl.committed_files(out) == [f0, f1, f2]
    s = fsl.stats(out)
    assert (s["committed_files"], s["data_files"], s["orphan_files"], s["last_batch"]) == (3, 3, 0, 2)
    assert (s["committed_records"], s["listed_records"], s["missing_files"]) == (4, 4, 0)
    assert s["log_files"] == ["0", "1", "2"] and s["problems"] == []
    v = fsl.committed_view(out)
    assert v["partition"].tolist() == [0, 0, 1, 2] and v["seq"].tolist() == [0, 1, 2, 3]


def test_compact_then_deltas_superseded_files_ignored(out):
    files = [data_file(out, f"part-00000-{i:03d}-c000.json", [rec("k", i)]) for i in range(12)]
    # stale deltas left next to the compact (cleanupDelay): "5" lists a file 9.compact does not, which
    # must therefore be an orphan; "3" is unreadable garbage that must never be opened
    stray = data_file(out, "part-00000-stale-c000.json", [rec("k", 99)])
    write_log(out, "5", [entry(stray)])
    (out / "_spark_metadata" / "3").write_text("garbage")
    write_log(out, "9.compact", [entry(f) for f in files[:10]])
    write_log(out, "10", [entry(files[10])])
    write_log(out, "11", [entry(files[11])])
    assert fsl.committed_files(out) == files
    assert fsl.orphan_files(out) == [stray]
    s = fsl.stats(out)
    assert s["log_files"] == ["9.compact", "10", "11"] and s["last_batch"] == 11
    assert s["committed_records"] == 12 and s["listed_records"] == 13


def test_newest_compact_wins_over_an_older_one(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    b = data_file(out, "part-00000-b-c000.json", [rec("k", 1)])
    write_log(out, "9.compact", [entry(a)])
    write_log(out, "19.compact", [entry(b)])  # a hand-trimmed newer compact: only it counts
    assert fsl.committed_files(out) == [b]
    assert fsl.stats(out)["log_files"] == ["19.compact"]


def test_compact_and_delta_of_the_same_batch(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    b = data_file(out, "part-00000-b-c000.json", [rec("k", 1)])
    write_log(out, "9", [entry(a)])
    write_log(out, "9.compact", [entry(a), entry(b)])
    assert fsl.committed_files(out) == [a, b]
    assert any("both 9 and 9.compact" in p for p in fsl.stats(out)["problems"])


def test_delete_action(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    b = data_file(out, "part-00000-b-c000.json", [rec("k", 1)])
    write_log(out, "0", [entry(a), entry(b)])
    write_log(out, "1", [entry(a, action="delete")])
    assert fsl.committed_files(out) == [b]
    assert fsl.orphan_files(out) == [a]
    assert fsl.stats(out)["deleted_entries"] == 1
    # Spark 3.1+ ignores "action"
    assert fsl.committed_files(out, honour_delete=False) == [a, b]
    # re-added after a delete: committed again, now at its new place in commit order
    write_log(out, "2", [entry(a)])
    assert fsl.committed_files(out) == [b, a]


def test_dir_entries_and_unknown_actions(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    (out / "k=1").mkdir()
    write_log(out, "0", [entry(out / "k=1", is_dir=True), entry(a, action="append")])
    assert fsl.committed_files(out) == [a]
    assert any("unknown action 'append'" in p for p in fsl.stats(out)["problems"])


def test_orphans_and_what_is_not_data(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    orphan = data_file(out, "part-00001-b-c000.json", [rec("k", 0)])
    part_orphan = data_file(out, "k=1/part-00002-c.c000.json", [rec("k", 5)])
    for junk in (".part-00000-a-c000.json.crc", "_SUCCESS", ".hidden.json", "part-x.json._COPYING_",
                 "part-y.json.crc", "_temporary/0/part-z.json", ".tmpdir/part-w.json"):
        (out / junk).parent.mkdir(parents=True, exist_ok=True)
        (out / junk).write_text('{"key":"junk","seq":1}\n')
    write_log(out, "0", [entry(a)])
    (out / "_spark_metadata" / ".1.0b6c-uuid.tmp").write_text('v1\n{"path":"file:///x"')  # killed mid-write
    (out / "_spark_metadata" / ".0.crc").write_bytes(b"crc\x00")
    assert fsl.all_data_files(out) == sorted([a, orphan, part_orphan])
    assert fsl.orphan_files(out) == sorted([orphan, part_orphan])
    s = fsl.stats(out)
    assert (s["committed_files"], s["data_files"], s["orphan_files"], s["last_batch"]) == (1, 3, 2, 0)


def test_empty_metadata_dir_everything_is_orphan(out):
    (out / "_spark_metadata").mkdir()
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    assert fsl.committed_files(out) == []
    assert fsl.orphan_files(out) == [a]
    s = fsl.stats(out)
    assert s["last_batch"] is None and s["committed_records"] == 0 and s["listed_records"] == 1
    assert len(fsl.committed_view(out)) == 0 and list(fsl.committed_view(out).columns)[:6] == \
        ["partition", "offset", "file", "line", "key", "seq"]


def test_empty_batch_is_bare_v1(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    write_log(out, "0", [entry(a)])
    write_log(out, "1", [])
    assert (out / "_spark_metadata" / "1").read_bytes() == b"v1"
    assert fsl.committed_files(out) == [a] and fsl.stats(out)["last_batch"] == 1


# --------------------------------------------------------------------------------------------- URIs


def test_real_spark_entry_decodes():
    e = json.loads(REAL_ENTRY)
    assert fsl.uri_to_path(e["path"]) == Path(os.path.realpath(
        "/tmp/i9b_spark/w/out dir%x/part-00000-4b42b4d8-a947-477d-9291-5f95b5a3591c-c000.json"))


def test_percent_encoded_uris_and_partition_dirs(tmp_path):
    out = tmp_path / "out dir%x"  # the shape the real run used
    out.mkdir()
    a = data_file(out, "part-00000-a b-c000.json", [rec("k", 0)])
    hive = data_file(out, "k=a%3Ab/part-00001-c.c000.json", [rec("k", 1)])  # Hive-escaped dir, on disk as is
    c = data_file(out, "part-00002-c-c000.json", [rec("k", 2)])
    write_log(out, "0", [entry(uri(a)), entry(uri(hive), size=hive.stat().st_size)])
    write_log(out, "1", [entry(uri(c, slashes="/"))])  # the older file:/abs form
    raw = (out / "_spark_metadata" / "0").read_text()
    assert "out%20dir%25x" in raw and "k=a%253Ab" in raw and "a%20b" in raw
    assert fsl.committed_files(out) == [a, hive, c]
    assert fsl.orphan_files(out) == []
    assert fsl.stats(out)["missing_files"] == 0


def test_non_local_uri_is_an_error(out):
    write_log(out, "0", [entry("hdfs://nn:8020/out/part-00000-a-c000.json")])
    with pytest.raises(FileSinkLogError, match="not a local file"):
        fsl.committed_files(out)


def test_missing_logged_file_and_remap(out, tmp_path):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    b = data_file(out, "part-00000-b-c000.json", [rec("k", 1)])
    # Spark ran in a container with the output mounted at /data/out
    write_log(out, "0", [entry("file:///data/out/part-00000-a-c000.json"),
                         entry("file:///data/out/part-00000-b-c000.json")])
    s = fsl.stats(out)
    assert s["missing_files"] == 2 and s["orphan_files"] == 2 and s["committed_records"] == 0
    assert any("remap={'/data/out': " in p for p in s["problems"])
    assert len(fsl.committed_view(out)) == 0  # reported, not raised
    remap = {"/data/out": str(out)}
    assert fsl.committed_files(out, remap=remap) == [a, b]
    s = fsl.stats(out, remap=remap)
    assert (s["missing_files"], s["orphan_files"], s["committed_records"], s["problems"]) == (0, 0, 2, [])
    # a committed file deleted from disk: counted, skipped, the rest still read
    b.unlink()
    s = fsl.stats(out, remap=remap)
    assert (s["missing_files"], s["committed_files"], s["data_files"], s["committed_records"]) == (1, 2, 1, 1)
    problems = []
    v = fsl.committed_view(out, problems, remap=remap)
    assert v["seq"].tolist() == [0] and problems == []  # the view only reads what is on disk
    problems = []
    assert len(fsl.read_records([a, b], problems)) == 1 and "not on disk" in problems[0]


def test_size_mismatch(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    write_log(out, "0", [entry(a, size=a.stat().st_size + 7)])
    assert fsl.stats(out)["size_mismatch_files"] == 1
    write_log(out, "0", [entry(a)])
    assert fsl.stats(out)["size_mismatch_files"] == 0


# --------------------------------------------------------------------------------- damaged log files


def _two_batches(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    b = data_file(out, "part-00000-b-c000.json", [rec("k", 1)])
    write_log(out, "0", [entry(a)])
    return a, b


@pytest.mark.parametrize("body", ["", "v", 'v1\n{"path":"file:///x/part-1.json","si'])
def test_torn_last_log_file(out, body):
    a, b = _two_batches(out)
    (out / "_spark_metadata" / "1").write_text(body)
    with pytest.raises(FileSinkLogError, match=r"_spark_metadata/1 is (empty|cut off).*torn_last='skip'"):
        fsl.committed_files(out)
    with pytest.raises(FileSinkLogError):
        fsl.stats(out)
    assert fsl.committed_files(out, torn_last="skip") == [a]
    assert fsl.orphan_files(out, torn_last="skip") == [b]
    s = fsl.stats(out, torn_last="skip")
    assert s["torn_log"] == "1" and s["last_batch"] == 0 and any("never committed" in p for p in s["problems"])


def test_torn_inside_a_utf8_character(out):
    a, b = _two_batches(out)
    # URI.toString keeps non-ASCII characters raw: the cut can fall inside one
    whole = write_log(out, "1", [entry(f"file://{out}/é.json")]).read_bytes()
    (out / "_spark_metadata" / "1").write_bytes(whole[:whole.index("é".encode()) + 1])
    with pytest.raises(FileSinkLogError, match="cut off inside a UTF-8 character"):
        fsl.committed_files(out)
    assert fsl.committed_files(out, torn_last="skip") == [a]
    (out / "_spark_metadata" / "0").write_bytes(b"v1\n\xff" + json.dumps(entry(a)).encode())  # not a cut
    with pytest.raises(FileSinkLogError, match="not UTF-8"):
        fsl.committed_files(out, torn_last="skip")


def test_torn_last_line_with_good_lines_before_it(out):
    a, b = _two_batches(out)
    write_log(out, "1", [entry(b), '{"path":"file:///x/part-9.json","size":1'])
    with pytest.raises(FileSinkLogError, match="cut off in its last line"):
        fsl.committed_files(out)
    # the whole batch is uncommitted, not just its torn line
    assert fsl.committed_files(out, torn_last="skip") == [a]


def test_torn_file_that_is_not_the_last_always_raises(out):
    a, b = _two_batches(out)
    (out / "_spark_metadata" / "0").write_text("")
    write_log(out, "1", [entry(b)])
    for mode in ("raise", "skip"):
        with pytest.raises(FileSinkLogError, match="not the last log file"):
            fsl.committed_files(out, torn_last=mode)


def test_bad_line_before_the_last_is_corruption(out):
    a, b = _two_batches(out)
    write_log(out, "1", ['{"path":"file:///x/part-9.json","si', entry(b)])
    with pytest.raises(FileSinkLogError, match=r"_spark_metadata/1:2 .*corrupt"):
        fsl.committed_files(out, torn_last="skip")


def test_trailing_newline_and_crlf_tolerated(out):
    a, b = _two_batches(out)
    write_log(out, "1", [entry(b)], trailing="\n")
    assert fsl.committed_files(out) == [a, b]
    (out / "_spark_metadata" / "1").write_text("v1\r\n" + json.dumps(entry(b)) + "\r\n")
    assert fsl.committed_files(out) == [a, b]


def test_missing_version_header(out):
    a, b = _two_batches(out)
    write_log(out, "1", [entry(b)], header=json.dumps(entry(a)))
    for mode in ("raise", "skip"):
        with pytest.raises(FileSinkLogError, match=r"does not start with a version line 'v1'"):
            fsl.committed_files(out, torn_last=mode)


@pytest.mark.parametrize("header", ["v2", "v10"])
def test_unknown_version(out, header):
    a, b = _two_batches(out)
    write_log(out, "1", [entry(b)], header=header)
    with pytest.raises(FileSinkLogError, match=rf"log version {header}, this reader knows v1 .*newer Spark"):
        fsl.committed_files(out, torn_last="skip")


def test_gap_in_the_log(out):
    a, b = _two_batches(out)
    write_log(out, "2", [entry(b)])
    with pytest.raises(FileSinkLogError, match=r"batches 1 are missing .*doesn't exist"):
        fsl.committed_files(out)
    write_log(out, "9.compact", [entry(a)])
    write_log(out, "13", [entry(b)])
    with pytest.raises(FileSinkLogError, match=r"batches 10–12 are missing \(reading 9\.\.13"):
        fsl.committed_files(out)


def test_no_spark_metadata(out):
    data_file(out, "part-00000-a-c000.json", [rec("k", 0)])
    for f in (fsl.committed_files, fsl.orphan_files, fsl.committed_view, fsl.listing_view, fsl.stats):
        with pytest.raises(FileSinkLogError, match=r"not a Spark file-sink output directory; point --file-sink "
                                                   r"at the directory given to writeStream"):
            f(out)
    with pytest.raises(FileSinkLogError, match="not a Spark file-sink"):
        fsl.committed_files(out.parent / "nowhere")


def test_log_file_vanishing_mid_read_follows_the_newer_compact(out, monkeypatch):
    """Spark's allFiles: a concurrent compaction's cleanup deleted a file being read → re-list and read
    from the newer compact; without a newer compact it is an error."""
    a, b = _two_batches(out)
    write_log(out, "1", [entry(b)])
    real = fsl._parse_log_file
    calls = []

    def racing(p):
        calls.append(p.name)
        if p.name == "0" and len(calls) <= 2:
            (out / "_spark_metadata" / "0").unlink()
            write_log(out, "9.compact", [entry(a), entry(b)])
            raise FileNotFoundError(2, "gone", str(p))
        return real(p)

    monkeypatch.setattr(fsl, "_parse_log_file", racing)
    assert fsl.committed_files(out) == [a, b]
    assert fsl.stats(out)["log_files"] == ["9.compact"]

    def vanished(p):
        raise FileNotFoundError(2, "gone", str(p))

    monkeypatch.setattr(fsl, "_parse_log_file", vanished)
    with pytest.raises(FileSinkLogError, match="vanished while being read"):
        fsl.committed_files(out)


# ------------------------------------------------------------------------------------------ records


def test_read_records_columns(out):
    a = data_file(out, "part-00000-a-c000.json", [rec("a", 0, part=2, off=10), {"key": "b", "seq": 1}],
                  extra="\n" + '{"key":"c","seq":"x"}\n' + '{"key":"d","seq":')  # blank, bad seq, torn last
    b = data_file(out, "part-00000-b-c000.json", [{"key": "e", "seq": 7, "partition": 4, "line": "L"}])
    df = fsl.read_records([a, b])
    assert list(df.columns[:6]) == ["partition", "offset", "file", "line", "key", "seq"]
    assert df["partition"].tolist() == [0, 0, 0, 0, 1]
    assert df["line"].tolist() == [0, 1, 3, 4, 0] and df["offset"].tolist() == df["line"].tolist()
    assert df["file"].tolist() == [a.name] * 4 + [b.name]
    assert str(df["seq"].dtype) == "Int64" and df["seq"].isna().tolist() == [False, False, True, True, False]
    assert df["key"].tolist()[:3] == ["a", "b", "c"] and pd.isna(df["key"].iloc[3])
    assert str(df["key"].dtype) == "string"
    assert df["op.input"].tolist()[0] == "2:10" and df["op.input"].iloc[1:].isna().all()
    # JSON fields named like our own columns are kept aside
    assert df["json_partition"].iloc[4] == 4 and df["json_line"].iloc[4] == "L"
    assert df["in_offset"].iloc[0] == 10


def test_read_records_gzip_and_unsupported_codec(out):
    g = out / "part-00000-a-c000.json.gz"
    g.write_bytes(gzip.compress(b'{"key":"a","seq":1}\n{"key":"a","seq":2}\n'))
    t = out / "part-00001-a-c000.json.gz"
    t.write_bytes(gzip.compress(b'{"key":"b","seq":1}\n{"key":"b","seq":2}\n' * 50)[:-30])  # killed writer
    df = fsl.read_records([g, t])
    assert df["seq"].tolist()[:2] == [1, 2] and len(df) > 2 and "op.input" not in df.columns
    with pytest.raises(FileSinkLogError, match="compression"):
        fsl.read_records([out / "part-00000-a-c000.json.snappy"])


def test_read_records_empty():
    df = fsl.read_records([])
    assert len(df) == 0 and str(df["seq"].dtype) == "Int64" and str(df["partition"].dtype) == "int32"


# ------------------------------------------------------------------ the views, fed to the checker


def _pipeline_with_a_killed_attempt(out):
    """Input: keys a, b with seq 0..3 on input partitions 0, 1. Batches 0, 1 committed; batch 1's first
    attempt (driver killed before _spark_metadata/1) left a full copy and a torn partial file."""
    inp = pd.DataFrame([{"key": k, "seq": s, "partition": p, "offset": s}
                        for p, k in enumerate("ab") for s in range(4)])
    b0 = data_file(out, "part-00000-zzz-c000.json", [rec(k, s, p) for p, k in enumerate("ab") for s in (0, 1)])
    first = [rec(k, s, p) for p, k in enumerate("ab") for s in (2, 3)]
    dead = data_file(out, "part-00000-aaa-c000.json", first)  # the dead attempt's full copy
    torn = data_file(out, "part-00001-aab-c000.json", first[:1], extra='{"key":"b","se')
    b1 = data_file(out, "part-00000-mmm-c000.json", first)  # the re-run, committed
    write_log(out, "0", [entry(b0)])
    write_log(out, "1", [entry(b1)])
    return inp, [b0, b1], [dead, torn]


def test_duplicates_in_listing_only(out):
    inp, committed, orphans = _pipeline_with_a_killed_attempt(out)
    assert fsl.committed_files(out) == committed and fsl.orphan_files(out) == orphans
    cv = fsl.committed_view(out)
    lv = fsl.listing_view(out)
    ok = exactly_once.check(pd.DataFrame(), inp, cv)
    assert ok["verdict"] == "valid" and ok["stats"]["output_with_input_ref"] == 8, ok["counts"]
    bad = exactly_once.check(pd.DataFrame(), inp, lv)
    assert bad["verdict"] == "invalid"
    assert bad["counts"]["duplicate"] == 4 and bad["counts"]["duplicate-records"] == 5
    assert bad["counts"]["unexpected"] == 1  # the torn line
    assert bad["counts"]["lost"] == 0
    # a committed file keeps its partition number in both views; orphans come after, by name
    cmap = dict(zip(cv["file"], cv["partition"]))
    lmap = dict(zip(lv["file"], lv["partition"]))
    assert cmap == {"part-00000-zzz-c000.json": 0, "part-00000-mmm-c000.json": 1}
    assert lmap == {**cmap, "part-00000-aaa-c000.json": 2, "part-00001-aab-c000.json": 3}
    s = fsl.stats(out)
    assert (s["committed_records"], s["listed_records"], s["orphan_files"]) == (8, 14, 2)
    assert s["committed_records"] == len(cv) and s["listed_records"] == len(lv)


def test_name_order_would_be_nonmonotonic_commit_order_is_not(out):
    """Data file names are part-<split>-<random uuid>: sorting by name mixes batches up. The views number
    files in commit order, so the checker sees each key's records in the order Spark wrote them."""
    inp = pd.DataFrame([{"key": "a", "seq": s, "partition": 0, "offset": s} for s in range(3)])
    fs = [data_file(out, f"part-00000-{u}-c000.json", [rec("a", s)]) for s, u in enumerate(["c", "a", "b"])]
    for i, f in enumerate(fs):
        write_log(out, str(i), [entry(f)])
    assert exactly_once.check(pd.DataFrame(), inp, fsl.committed_view(out))["verdict"] == "valid"
    by_name = fsl.read_records(sorted(fs))
    assert exactly_once.check(pd.DataFrame(), inp, by_name)["counts"]["nonmonotonic"] == 1
