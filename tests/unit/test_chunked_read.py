"""The chunked read (issue 11): the topics read ``READ_CHUNK`` messages at a time into compact columns,
the history read in blocks, and the check on those frames give the same verdict, counts and examples
as the straightforward path (every message in memory, decoded at once), on a run with planted
duplicates, losses, an aborted read and a reordering, with chunk boundaries in the middle of keys."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from confluent_kafka import Message, TopicPartition

from onceproof.checkers import exactly_once, transactions
from onceproof.checkers.exactly_once import Recovery
from onceproof.checking import checks as checking
from onceproof.clients import topics
from onceproof.store import columns, readers
from onceproof.store.runfiles import INPUT, OUTPUT, OUTPUT_UNCOMMITTED, RunFiles

KEYS, PER_KEY, PARTS = 7, 40, 3
ABORTED = {"incarnation": "0", "batch": 99, "attempt": 5}


# ----------------------------------------------------------------------------------------------------
# a synthetic run, as the Kafka client hands it over

def _input_messages() -> list[Message]:
    """KEYS × PER_KEY records, key k on partition k % PARTS, seq 0, 1, ... per key, round-robin."""
    offs = [0] * PARTS
    msgs = []
    for s in range(PER_KEY):
        for k in range(KEYS):
            p = k % PARTS
            v = json.dumps({"key": f"k{k}", "seq": s, "t": 1000 + s}).encode()
            msgs.append(Message(topic="in", partition=p, offset=offs[p], key=f"k{k}".encode(), value=v,
                                timestamp=(1, 1_000_000 + len(msgs))))
            offs[p] += 1
    return msgs


def _output_messages(inp: list[Message]) -> tuple[list[Message], list[Message], dict]:
    """(committed, uncommitted, planted): the input through a pipeline that lost 3 records, wrote 4
    again (2 of those copies from an attempt the sink log says aborted), swapped two consecutive
    records of one key, and wrote a garbage value; read_uncommitted also sees 5 aborted records at
    offsets read_committed skips."""
    recs = [(m, json.loads(m.value())) for m in inp]
    order = list(range(len(recs)))
    a = 3 * KEYS + 2  # k2 seq 3 and seq 4 swap places
    order[a], order[a + KEYS] = order[a + KEYS], order[a]
    lost = {10, 50, 200}
    again = [30, 31, 90, 90]  # 90 three times in all
    rows = [(i, 0, False) for i in order if i not in lost] + [(i, 1, n >= 2) for n, i in enumerate(again)]
    committed, uncommitted = [], []
    offs = [0] * PARTS
    for n, (i, attempt, aborted) in enumerate(rows):
        m, v = recs[i]
        p = (int(v["key"][1:]) * 5 + 1) % PARTS
        att = ABORTED["attempt"] if aborted else attempt
        batch = ABORTED["batch"] if aborted else n // 25
        h = [("op.incarnation", b"0"), ("op.batch", str(batch).encode()), ("op.sink_partition", str(p).encode()),
             ("op.attempt", str(att).encode()), ("op.txn_id", f"eos-{m.partition()}".encode()),
             ("op.input", f"{m.partition()}:{m.offset()}".encode()), ("op.sink", b"eos")]
        value = json.dumps({"key": v["key"], "seq": v["seq"], "in_partition": m.partition(),
                            "in_offset": m.offset(), "in_ts": m.timestamp()[1]}).encode()
        out = Message(topic="out", partition=p, offset=offs[p], key=m.key(), value=value,
                      timestamp=(1, m.timestamp()[1] + 5), headers=h)
        committed.append(out)
        uncommitted.append(out)
        offs[p] += 1
        if n % 60 == 59:  # an aborted transaction's record: only read_uncommitted returns it
            uncommitted.append(Message(topic="out", partition=p, offset=offs[p], key=m.key(), value=value,
                                       timestamp=(1, 0), headers=h))
            offs[p] += 1
    garbage = Message(topic="out", partition=0, offset=offs[0], key=b"k0", value=b"\x00garbage", timestamp=(1, 7),
                      headers=[("op.batch", b"1")])
    committed.append(garbage)
    uncommitted.append(garbage)
    planted = {"lost": 3, "duplicate": 3, "duplicate-records": 4, "nonmonotonic": 1, "unexpected": 1,
               "aborted-read": 2, "aborted_hidden": len(uncommitted) - len(committed)}
    return committed, uncommitted, planted


def _history(inp: list[Message]) -> pd.DataFrame:
    ops = []
    for m in inp:
        v = json.loads(m.value())
        ops.append({"type": "invoke", "f": "send", "key": v["key"], "seq": v["seq"]})
        ops.append({"type": "ok", "f": "send", "key": v["key"], "seq": v["seq"], "partition": m.partition(),
                    "offset": m.offset()})
    ops.append({"type": "ok", "f": "send", "key": "k1", "seq": 5000, "partition": 0, "offset": 10**6})  # lost write
    return pd.DataFrame(ops)


def _sink_log() -> pd.DataFrame:
    return pd.DataFrame([{"time": 1.0, "event": "abort", "incarnation": ABORTED["incarnation"],
                          "batch": ABORTED["batch"], "partition": p, "attempt": ABORTED["attempt"],
                          "txn_id": f"eos-{p}"} for p in range(PARTS)])


@pytest.fixture(scope="module")
def run():
    inp = _input_messages()
    out, unc, planted = _output_messages(inp)
    return {"input": inp, "output": out, "uncommitted": unc, "history": _history(inp), "planted": planted}


def _ends(msgs: list[Message]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for m in msgs:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
    return ends


# ----------------------------------------------------------------------------------------------------
# the two paths

def _straight(msgs: list[Message], with_headers: bool) -> pd.DataFrame:
    """The straightforward read: every message's fields in lists, one frame, headers decoded at once."""
    frame = pd.DataFrame({"partition": pd.array([m.partition() for m in msgs], dtype="int32"),
                          "offset": pd.array([m.offset() for m in msgs], dtype="int64"),
                          "timestamp": pd.array([m.timestamp()[1] for m in msgs], dtype="int64"),
                          "key": [m.key().decode() for m in msgs], "value": [m.value() for m in msgs]})
    if with_headers:
        frame = frame.join(topics._headers_frame([m.headers() for m in msgs]))
    return frame


def _chunked(msgs: list[Message], with_headers: bool, chunk: int, batch: int = 13, **kw) -> pd.DataFrame:
    """``topics.Records`` fed the way ``read_topic`` feeds it: ``consume()`` batches of ``batch``."""
    r = topics.Records("t", with_headers, chunk=chunk, **kw)
    ends = _ends(msgs)
    todo = set(ends)
    for i in range(0, len(msgs), batch):
        r.add(msgs[i:i + batch], ends, todo)
    assert not todo
    return r.frame()


def _result(run, inp, out, **kw) -> dict:
    r = checking.run_checks(run["history"], inp, out, Recovery(), sink_log=_sink_log(), **kw)
    return json.loads(json.dumps(r, default=str))


def _reference(run) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    inp = topics.decode_values(_straight(run["input"], False))
    out = topics.decode_values(_straight(run["output"], True))
    unc = _straight(run["uncommitted"], True)
    return _result(run, inp, out, uncommitted=unc), inp, out


def _same_values(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal columns, in the same order, holding equal values (NA = NA), whatever the dtypes."""
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        x, y = a[c].astype(object), b[c].astype(object)
        assert (x.isna() == y.isna()).all(), c
        assert x[x.notna()].tolist() == y[y.notna()].tolist(), c


def test_the_reference_run_finds_exactly_what_was_planted(run):
    r, _, _ = _reference(run)
    planted = run["planted"]
    for name in ("lost", "duplicate", "duplicate-records", "nonmonotonic", "unexpected", "aborted-read"):
        assert r["counts"][name] == planted[name], name
    assert r["counts"]["lost-write"] == 1
    assert r["stats"]["aborted_hidden"] == planted["aborted_hidden"] == 4
    assert r["verdict"] == "invalid"


@pytest.mark.parametrize("chunk,slabs", [(1, False), (7, False), (7, True), (100, True), (10**6, False)])
def test_chunked_frames_and_results_equal_the_straightforward_ones(run, chunk, slabs):
    """``slabs``: columns written into arrays allocated for the topic's end offsets, as read_topic does."""
    ref, ref_in, ref_out = _reference(run)

    def cap(msgs):
        return sum(_ends(msgs).values()) if slabs else None

    inp = _chunked(run["input"], False, chunk, decode=topics.decode_values, capacity=cap(run["input"]))
    out = _chunked(run["output"], True, chunk, decode=topics.decode_values, capacity=cap(run["output"]))
    unc = _chunked(run["uncommitted"], False, chunk, places_only=True, capacity=cap(run["uncommitted"]))
    _same_values(inp, ref_in)
    _same_values(out, ref_out)
    assert list(unc.columns) == ["partition", "offset"] and len(unc) == len(run["uncommitted"])
    got = _result(run, inp, out, aborted_hidden=transactions.hidden_aborted(unc, out))
    assert got == ref  # verdict, counts, every example, stats, bad keys
    assert isinstance(out["key"].dtype, pd.CategoricalDtype)
    assert isinstance(out["op.batch"].dtype, pd.CategoricalDtype)
    assert out["op.input"].dtype == "string[pyarrow]"


def test_chunk_boundaries_fall_in_the_middle_of_keys(run):
    seen = []

    def spy(frame):
        seen.append(set(frame["key"]))
        return topics.decode_values(frame)

    _chunked(run["output"], True, 7, decode=spy)
    assert len(seen) > 10
    # the same key in consecutive chunks: its records were cut by a chunk boundary
    assert sum(bool(a & b) for a, b in zip(seen, seen[1:])) > 5


def test_blockwise_checker_is_independent_of_its_block_size(run, monkeypatch):
    ref, ref_in, ref_out = _reference(run)
    inp = _chunked(run["input"], False, 11, decode=topics.decode_values)
    out = _chunked(run["output"], True, 11, decode=topics.decode_values)
    monkeypatch.setattr(exactly_once, "_BLOCK", 5)
    monkeypatch.setattr(exactly_once, "_REF_BLOCK", 3)
    assert _result(run, inp, out, uncommitted=_straight(run["uncommitted"], False)) == ref


# ----------------------------------------------------------------------------------------------------
# read_pair: the order of the reads and the uncommitted view's columns

class _FakeConsumer:
    """The part of ``confluent_kafka.Consumer`` that ``read_topic`` uses, over in-memory topics."""

    topics: dict = {}
    log: list = []

    def __init__(self, conf):
        self.committed = conf["isolation.level"] == "read_committed"

    def assign(self, tps):
        self.topic = tps[0].topic
        _FakeConsumer.log.append((self.topic, "committed" if self.committed else "uncommitted"))
        msgs = _FakeConsumer.topics[(self.topic, self.committed)]
        self.batches = iter([msgs[i:i + 50] for i in range(0, len(msgs), 50)])
        self.pos = {tp.partition: 0 for tp in tps}

    def consume(self, num_messages=1, timeout=-1):
        b = next(self.batches, None)
        if b is None:
            self.pos = dict(_ends(_FakeConsumer.topics[(self.topic, False)]))
            return []
        return b

    def position(self, tps):
        return [TopicPartition(tp.topic, tp.partition, self.pos.get(tp.partition, 0)) for tp in tps]

    def close(self):
        pass


def test_read_pair_reads_input_then_uncommitted_then_committed(run, monkeypatch):
    _FakeConsumer.topics = {("in", True): run["input"], ("in", False): run["input"],
                            ("out", True): run["output"], ("out", False): run["uncommitted"]}
    _FakeConsumer.log = []
    monkeypatch.setattr(topics, "Consumer", _FakeConsumer)
    monkeypatch.setattr(topics, "end_offsets",
                        lambda b, t, committed: _ends(_FakeConsumer.topics[(t, False)]))
    inp, out, unc, reasons = checking.read_pair("fake:1", "in", "out", chunk=9)
    assert _FakeConsumer.log == [("in", "committed"), ("out", "uncommitted"), ("out", "committed")]
    assert reasons == []
    assert list(unc.columns) == ["partition", "offset"]
    ref, ref_in, ref_out = _reference(run)
    _same_values(inp, ref_in)
    _same_values(out, ref_out)
    assert transactions.hidden_aborted(unc, out) == run["planted"]["aborted_hidden"]


def test_check_live_saves_every_field_and_checks_with_what_the_checks_read(run, tmp_path, monkeypatch):
    from onceproof.checking.recovery import RecoveryStatus

    _FakeConsumer.topics = {("in", True): run["input"], ("in", False): run["input"],
                            ("out", True): run["output"], ("out", False): run["uncommitted"]}
    monkeypatch.setattr(topics, "Consumer", _FakeConsumer)
    monkeypatch.setattr(topics, "end_offsets", lambda b, t, committed: _ends(_FakeConsumer.topics[(t, False)]))
    (tmp_path / "history.jsonl").write_text(_history_lines(run))
    (tmp_path / "sink.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _sink_log().to_dict("records")))
    seen = {}
    real = checking.run_checks

    def spy(hist, inp, out, *a, **kw):
        seen.update(inp=list(inp.columns), out=list(out.columns), hist=len(hist))
        return real(hist, inp, out, *a, **kw)

    monkeypatch.setattr(checking, "run_checks", spy)
    ends = _ends(run["uncommitted"])
    st = RecoveryStatus(finished=True, input_end=_ends(run["input"]), output_lso=ends, output_hw=ends)
    r = checking.check_live("fake:1", "in", "out", tmp_path, st)
    checked = dict(seen)  # before the reference run below goes through the spy too
    ref, _, _ = _reference(run)
    assert {k: r["counts"][k] for k in ref["counts"]} == ref["counts"]
    assert r["stats"]["aborted_hidden"] == run["planted"]["aborted_hidden"]
    files = RunFiles(tmp_path)
    assert {"in_partition", "in_offset", "in_ts"} <= set(pd.read_parquet(files.output).columns)
    assert "t" in pd.read_parquet(files.input).columns
    assert list(pd.read_parquet(files.output_uncommitted).columns) == ["partition", "offset"]
    assert not {"in_partition", "in_offset", "in_ts"} & set(checked["out"]) and "t" not in checked["inp"]
    assert checked["hist"] == (run["history"]["type"] != "invoke").sum() + 1  # the sends' outcomes, one invoke


# ----------------------------------------------------------------------------------------------------
# snapshots: written as a set

def test_a_failed_snapshot_write_leaves_no_input_without_output(tmp_path, monkeypatch):
    files = RunFiles(tmp_path)
    frame = pd.DataFrame({"partition": [0], "offset": [1]})
    real = checking._save

    def save(f, path):
        if path.name == f".{OUTPUT}.tmp":
            raise OSError("disk full")
        real(f, path)

    monkeypatch.setattr(checking, "_save", save)
    with pytest.raises(OSError, match="disk full"):
        with checking.Snapshots(files) as snaps:
            snaps.write(OUTPUT_UNCOMMITTED, frame)
            snaps.write(INPUT, frame)
            snaps.write(OUTPUT, frame)
            snaps.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_snapshots_replace_an_old_pair_with_the_input_renamed_last(tmp_path, monkeypatch):
    files = RunFiles(tmp_path)
    old = pd.DataFrame({"x": [0]})
    old.to_parquet(files.input)
    old.to_parquet(files.output)
    renamed = []
    real = type(files.input).replace
    monkeypatch.setattr(type(files.input), "replace", lambda self, target: (renamed.append(target.name),
                                                                             real(self, target))[1])
    with checking.Snapshots(files) as snaps:
        snaps.write(INPUT, pd.DataFrame({"x": [1, 1]}))
        snaps.write(OUTPUT, pd.DataFrame({"x": [2, 2]}))
        snaps.commit()
    assert renamed == [OUTPUT, INPUT]
    assert len(pd.read_parquet(files.input)) == len(pd.read_parquet(files.output)) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ----------------------------------------------------------------------------------------------------
# the history, read in blocks

def _history_lines(run) -> str:
    return "".join(json.dumps({"index": i, **{k: v for k, v in op.items() if not (isinstance(v, float) and v != v)}})
                   + "\n" for i, op in enumerate(run["history"].to_dict("records")))


@pytest.mark.parametrize("variant", ["plain", "gz", "torn-last", "bad-last-line-with-newline", "blank-and-crlf-lines",
                                     "huge-int"])
def test_history_read_in_blocks_equals_the_line_by_line_read(run, tmp_path, monkeypatch, variant):
    text = _history_lines(run)
    if variant == "torn-last":
        text += '{"index": 99, "type": "ok", "f": "se'
    elif variant == "bad-last-line-with-newline":
        text += '{"index": 99, "type": "ok", "f": "se\n'
    elif variant == "blank-and-crlf-lines":
        text = text.replace("\n", "\n  \n", 3).replace("\n", "\r\n", 40)
    elif variant == "huge-int":
        text = text.replace('"seq": 7,', '"seq": 123456789012345678901234,', 1)
    path = tmp_path / "history.jsonl"
    if variant == "gz":
        with gzip.open(tmp_path / "history.jsonl.gz", "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    p1, p2 = [], []
    whole = pd.DataFrame.from_records(readers._json_lines(path, p1, torn_anywhere=False))
    monkeypatch.setattr(readers, "JSON_BLOCK", 997)  # blocks end in the middle of lines
    blocks = readers.read_history(tmp_path, p2)
    _same_values(blocks, whole)
    assert p1 == p2
    assert variant.startswith(("torn", "bad-last")) == bool(p2)


@pytest.mark.parametrize("end", ["\u2028", "\u2029", "\x85", "\x0b", "\x1c", "\r"])
def test_a_line_end_only_splitlines_sees_is_read_the_line_by_line_way(tmp_path, monkeypatch, end):
    """pyarrow would parse a value holding U+2028 (or \\x0b, ...) as one line; ``str.splitlines`` — the
    line-by-line read's, which numbers the lines — ends the line there. The block reader must notice
    such a block (it skips the UTF-8 ones' search in an ASCII block) and agree with the line read."""
    lines = [json.dumps({"type": "ok", "key": f"k{i}", "seq": i}) for i in range(300)]
    lines[120] = '{"type": "ok", "key": "a' + end + 'b", "seq": 120}'  # raw, as json.dumps never writes it
    path = tmp_path / "history.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    monkeypatch.setattr(readers, "JSON_BLOCK", 4000)
    errors = []
    for read in (lambda: readers._json_lines(path, [], torn_anywhere=False),
                 lambda: readers.read_history(tmp_path, [])):
        with pytest.raises(readers.DamagedFile) as e:
            read()
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "history.jsonl:121" in errors[0]


def test_a_bad_history_line_before_the_last_names_its_line(tmp_path, monkeypatch):
    lines = [json.dumps({"type": "ok", "seq": i}) for i in range(200)]
    lines[150] = "[1, 2]"
    (tmp_path / "history.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(readers, "JSON_BLOCK", 500)
    with pytest.raises(readers.DamagedFile, match=r"history.jsonl:151 is not a JSON object"):
        readers.read_history(tmp_path)


def test_the_check_reads_the_history_without_its_invokes_and_finds_the_same(run, tmp_path):
    (tmp_path / "history.jsonl").write_text(_history_lines(run))
    whole = readers.read_history(tmp_path)
    invoked = checking.InvokedSeqs()
    slim = readers.read_history(tmp_path, None, checking.HISTORY_COLUMNS, invoked, True)
    assert len(slim) == len(whole) - (whole["type"] == "invoke").sum() + 1
    _, inp, out = _reference(run)
    a = exactly_once.check(whole, inp, out)
    b = exactly_once.check(slim, inp, out)
    assert json.dumps(a, default=str) == json.dumps(b, default=str)
    # the completeness test needs only each key's highest invoked seq
    cut = inp.assign(seq=inp["seq"] + 1000)
    assert checking.history_gaps(tmp_path / "history.jsonl", slim, cut, invoked.top()) == \
        checking.history_gaps(tmp_path / "history.jsonl", whole, cut) != []
    assert checking.history_gaps(tmp_path / "history.jsonl", slim, inp, invoked.top()) == []


# ----------------------------------------------------------------------------------------------------
# the columns of a chunked frame

def test_chunks_join_categories_strings_and_na_chunks():
    ch = columns.Chunks()
    ch.add(pd.DataFrame({"k": ["a", "b", "a", "a"], "x": [1.5, 2.0, 3.0, 4.0], "n": [1, 2, 3, 4]}))
    ch.add(pd.DataFrame({"k": [None, "c", "a", "c"], "x": [np.nan] * 4, "n": [5, 6, 7, 8], "h": ["u", "v", "w", "z"]}))
    ch.add(pd.DataFrame({"k": [None] * 2, "x": [0.1, 0.2], "n": [9, 10], "h": [None, None]}))
    f = ch.frame()
    assert list(f.columns) == ["k", "x", "n", "h"]
    assert isinstance(f["k"].dtype, pd.CategoricalDtype) and list(f["k"].cat.categories) == ["a", "b", "c"]
    assert f["k"].astype(object).where(f["k"].notna(), None).tolist() == \
        ["a", "b", "a", "a", None, "c", "a", "c", None, None]
    assert f["x"].dtype == np.float64  # 0.1 is not exact in float32
    assert f["n"].tolist() == list(range(1, 11)) and f["n"].dtype == np.int64
    assert f["h"].iloc[4:8].tolist() == ["u", "v", "w", "z"] and f["h"].iloc[:4].isna().all()


def test_chunks_narrow_exact_floats_and_ints_on_request():
    ch = columns.Chunks(narrow_ints=True)
    ch.add(pd.DataFrame({"p": [0.0, np.nan, 3.0], "o": [1, 2, 2**31], "s": [1, 2, 3]}))
    f = ch.frame()
    assert f["p"].dtype == np.float32 and f["p"].isna().tolist() == [False, True, False]
    assert f["o"].dtype == np.int64 and f["s"].dtype == np.int32


def test_a_varied_string_column_turns_to_arrow_strings_in_every_chunk(monkeypatch):
    monkeypatch.setattr(columns, "CATEGORY_MAX", 2)
    ch = columns.Chunks()
    ch.add(pd.DataFrame({"v": ["a", "a", "a", "b"]}))       # few values: categories
    ch.add(pd.DataFrame({"v": ["c", "d", "e", "f"]}))       # all distinct: arrow strings
    ch.add(pd.DataFrame({"v": ["a", "a", "a", "a"]}))       # the column stays arrow strings
    f = ch.frame()
    assert f["v"].dtype == "string[pyarrow]"
    assert f["v"].tolist() == ["a", "a", "a", "b", "c", "d", "e", "f", "a", "a", "a", "a"]


def test_slabs_hold_a_column_uncopied_and_give_way_to_a_different_dtype():
    ch = columns.Chunks(capacity=100)
    ch.add(pd.DataFrame({"n": [1, 2], "s": pd.array([1, None], dtype="Int64"), "k": ["a", "b"]}))
    ch.add(pd.DataFrame({"n": [3, 4], "s": pd.array([3, 4], dtype="Int64"), "k": ["b", "c"]}))
    slab = ch.cols["n"][0]
    assert isinstance(slab, columns._Slab) and slab.n == 4
    ch.add(pd.DataFrame({"n": [5.5, 6.0], "k": [None, "a"]}))  # a float chunk: joined by concat
    ch.add(pd.DataFrame({"n": [7, 8], "s": pd.array([None, 8], dtype="Int64"), "k": [f"v{i}" for i in range(2)]}))
    f = ch.frame()
    assert f["n"].tolist() == [1, 2, 3, 4, 5.5, 6, 7, 8]
    assert f["s"].dtype == "Int64" and f["s"].isna().tolist() == [False, True] + [False] * 2 + [True] * 3 + [False]
    assert list(f["k"].cat.categories) == ["a", "b", "c", "v0", "v1"]
    assert f["k"].astype(object).where(f["k"].notna(), None).tolist() == ["a", "b", "b", "c", None, "a", "v0", "v1"]


def test_a_slab_widens_its_codes_when_the_categories_outgrow_them():
    ch = columns.Chunks(capacity=1000)
    ch.add(pd.DataFrame({"k": [f"a{i % 100}" for i in range(300)]}))
    ch.add(pd.DataFrame({"k": [f"b{i}" for i in range(300)]}))  # 400 categories: int16 codes
    f = ch.frame()
    assert f["k"].tolist() == [f"a{i % 100}" for i in range(300)] + [f"b{i}" for i in range(300)]
