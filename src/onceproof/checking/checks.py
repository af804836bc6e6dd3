"""Glue between the topics and the pure checkers: read, save, check.

``check_live`` reads the input topic and the output topic at read_committed (after recovery) and the
output at read_uncommitted, saves them as ``input.parquet`` / ``output.parquet`` /
``output_uncommitted.parquet`` in the run directory, and runs ``onceproof.checkers.exactly_once`` composed with
``onceproof.checkers.transactions`` (aborted reads against ``sink.jsonl``, stuck partitions, the during-faults
reader's ``live.parquet``). ``check_saved`` re-runs the same checks offline on a stored run directory.

Memory (issue 11: 10M output records checked in under 2 GiB; bench/README.md): the topics are read a
chunk at a time into compact columns (``onceproof.clients.topics.Records``), the uncommitted view is cut to
partition/offset while it is read and dropped once counted, the history is read in blocks without its
invoke ops (:class:`InvokedSeqs`), and freed memory is handed back between the steps
(``onceproof.store.columns.release_freed_memory``).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from confluent_kafka import KafkaException

from onceproof.blocks import row_blocks
from onceproof.checkers import advice, compose, exactly_once, liveness, nearby, transactions
from onceproof.checkers.exactly_once import Recovery
from onceproof.checking.recovery import RecoveryStatus
from onceproof.clients import topics
from onceproof.nemesis import coverage, delete_records
from onceproof.sinks import file_log, kafka_topic, user_outputs
from onceproof.sinks.base import COMMITTED, OutputError, OutputLocation, OutputReader, OutputView
from onceproof.store import readers
from onceproof.store.columns import release_freed_memory
from onceproof.store.runfiles import INPUT, LIVE, LSO, OUTPUT, OUTPUT_UNCOMMITTED, RunFiles, stored
from onceproof.workloads import registry as workloads

QUERY_STOPPED = "the query stopped: "
"""How a recovery reason quoting the error that stopped the query begins (``harness/runner.py``'s recover
phase, ``checking/recovery.query_failure``); the check keeps the quote as ``result["query_stopped"]``."""
HISTORY_COLUMNS = ("type", "f", "key", "seq", "partition", "offset", "error", "txn")
"""The ``history.jsonl`` fields the checks read (the workloads' checkers, :func:`history_gaps`): the others
(``index``, ``time``, ``wall``, ``process``) are not loaded for a check (the report reads its own)."""


class CheckError(RuntimeError):
    """The data needed for a check is missing or unreadable."""


def read_pair(bootstrap: str, input_topic: str, output_topic: str, timeout_s: float = 300.0,
              workload: str = "keyed", chunk: int = topics.READ_CHUNK
              ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """Read the input (read_committed), then the output at read_uncommitted, then the output at
    read_committed into checker frames ``(input, output, uncommitted, reasons)``; ``reasons`` says which
    read did not reach its end offsets within ``timeout_s`` seconds.

    Each read goes ``chunk`` messages at a time into compact columns (``topics.Records``): the input's
    values decoded by ``topics.decode_values``, the output as ``onceproof.sinks.kafka_topic.read_output``
    reads it (the committed view by ``workload``'s decoder, the uncommitted one as ``partition``/``offset``
    only, read first)."""
    inp, reasons = read_input(bootstrap, input_topic, timeout_s, chunk)
    view = kafka_topic.read_output(OutputLocation(bootstrap, output_topic, workload=workload, timeout_s=timeout_s,
                                                  chunk=chunk))
    return inp, view.committed, view.uncommitted, reasons + view.unsettled


def read_input(bootstrap: str, input_topic: str, timeout_s: float = 300.0,
               chunk: int = topics.READ_CHUNK) -> tuple[pd.DataFrame, list[str]]:
    """The input topic at read_committed, values decoded by ``topics.decode_values``, and why the read is
    incomplete (it did not reach the end offsets within ``timeout_s`` seconds), ``[]`` when it is not."""
    inp = topics.read_topic(bootstrap, input_topic, committed=True, timeout_s=timeout_s, with_headers=False,
                            decode=topics.decode_values, chunk=chunk)
    why = [] if inp.complete else [f"reading {input_topic} did not reach its end offsets within {timeout_s:.0f}s"]
    return inp.frame, why


def read_output(reader: OutputReader, location: OutputLocation) -> OutputView:
    """``reader(location)`` (a sink entry's reader, ``sinks/base.py``). Raises ``CheckError`` with the
    reader's message when the output cannot be read."""
    try:
        return reader(location)
    except OutputError as e:
        raise CheckError(str(e)) from e


def _save(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as parquet at ``path`` (object columns as strings)."""
    obj = {c: "string" for c in frame.columns if frame[c].dtype == object}
    (frame.astype(obj) if obj else frame).to_parquet(path, index=False)


class Snapshots:
    """The topic snapshots of one check (``input.parquet``, ``output.parquet``, ...), written as a set.

    :meth:`write` puts a frame in a temporary file at once (so the caller can drop it from memory);
    :meth:`commit` removes the old ``input.parquet``, renames the others into place, then the input
    last, so that a read or write that fails midway never leaves ``input.parquet`` beside a missing or
    stale ``output.parquet`` (``check_saved`` takes that pair as the run's check data). Leaving the
    ``with`` block without :meth:`commit` (an error) removes the temporary files.
    """

    def __init__(self, files: RunFiles):
        self.files = files
        self.tmp: dict[str, Path] = {}

    def __enter__(self) -> Snapshots:
        return self

    def __exit__(self, *exc) -> bool:
        for p in self.tmp.values():
            p.unlink(missing_ok=True)
        return False

    def write(self, name: str, frame: pd.DataFrame) -> None:
        """``frame`` as the run file ``name``, under a temporary name until :meth:`commit`."""
        tmp = self.files / f".{name}.tmp"
        self.tmp[name] = tmp
        _save(frame, tmp)

    def commit(self) -> None:
        """Rename every written file into place, the input last."""
        (self.files / INPUT).unlink(missing_ok=True)
        for name in sorted(self.tmp, key=lambda n: n == INPUT):
            self.tmp[name].replace(self.files / name)
        self.tmp.clear()


def _sink_log(run_dir: Path | None) -> pd.DataFrame:
    """``sink.jsonl`` as a frame, one row per event (empty without a run directory or the file)."""
    return pd.DataFrame.from_records(readers.read_sink(run_dir) if run_dir else [])


def _read(reader, run_dir: Path, *args, advice: str = ""):
    """``reader(run_dir, *args)`` (a :mod:`onceproof.store.readers` reader). Raises ``CheckError`` naming the file,
    followed by ``advice``, when it is damaged or unreadable."""
    try:
        return reader(run_dir, *args)
    except (OSError, readers.DamagedFile) as e:
        raise CheckError(f"{e}{advice}") from e


def _rerun(replay: str) -> str:
    return f": re-run the test with `{replay}`" if replay else ""


def workload_ran(run_dir: Path | None) -> bool:
    """True when ``run_dir`` is a run of our workload (its ``test.json`` is not a ``check`` of foreign
    topics), so its ``history.jsonl`` is owed."""
    if run_dir is None or not RunFiles(run_dir).test.exists():
        return False
    try:
        return (readers.read_test(run_dir) or {}).get("kind", "run") != "check"
    except readers.DamagedFile:
        return True


SNAPSHOT_ONLY = {"input": ("t",), "output": ("in_partition", "in_offset", "in_ts")}
"""Decoded value fields the snapshots keep (for the report: the send time, each output record's input
record and its timestamp) and no check reads: dropped from the frames once saved (at 10M records, 240
MB of the ~1.3 GB of frames)."""


def _drop_snapshot_only(inp: pd.DataFrame, out: pd.DataFrame) -> None:
    """Drop :data:`SNAPSHOT_ONLY` columns from the frames, in place (each column is its own block in a
    chunked read's frame, so nothing is copied)."""
    for frame, cols in ((inp, SNAPSHOT_ONLY["input"]), (out, SNAPSHOT_ONLY["output"])):
        for c in cols:
            if c in frame.columns:
                del frame[c]


class InvokedSeqs:
    """A ``readers.read_history`` ``keep``: drops the history's ``invoke`` send ops, which no check reads
    row by row (the first is kept, so a history of invocations only still shows that the workload
    ran), and remembers per key the highest seq they invoked, all :func:`history_gaps` needs of them
    (:meth:`top`). A history holds an invoke and a completion per send, so this halves what a check
    keeps of it."""

    def __init__(self):
        self.parts: list[pd.Series] = []
        self.kept_one = False

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        if not {"type", "key", "seq"} <= set(frame.columns):
            return frame
        inv = _invokes(frame)
        if not inv.any():
            return frame
        self.parts.append(_top_seq(frame["key"][inv], frame["seq"][inv]))
        if not self.kept_one:
            inv[np.flatnonzero(inv)[0]] = False
            self.kept_one = True
        return frame[~inv]

    def top(self) -> pd.Series:
        """Per key (str) the highest seq invoked (float, NaN when none parsed)."""
        if not self.parts:
            return pd.Series(dtype=float)
        return pd.concat(self.parts).groupby(level=0, sort=False).max()


def _invokes(hist: pd.DataFrame) -> np.ndarray:
    """Mask of the history's ``invoke`` ops of sends (every op is a send when there is no ``f``)."""
    inv = (hist["type"] == "invoke").to_numpy(dtype=bool)
    if "f" in hist.columns:
        inv &= (hist["f"] == "send").to_numpy(dtype=bool)
    return inv


def _top_seq(keys: pd.Series, seqs: pd.Series) -> pd.Series:
    """Per key (as ``str``, equal str = equal key, as the checker compares them) the highest seq (float;
    NaN when none is a number)."""
    codes, strs = exactly_once.factorize_str(keys)
    top = pd.Series(pd.to_numeric(seqs, errors="coerce").to_numpy(dtype=float, na_value=np.nan)).groupby(codes).max()
    return top.set_axis(pd.Index(strs[top.index.to_numpy()], dtype=object)).groupby(level=0, sort=False).max()


def history_gaps(path: Path, hist: pd.DataFrame, inp: pd.DataFrame, invoked: pd.Series | None = None) -> list[str]:
    """Why ``history.jsonl`` cannot back the lost-write check: missing, empty, or ending before the input
    does (per key, an input seq above the highest seq the history invoked: the workload writes the
    ``invoke`` before it sends, so a complete history covers every input record). ``[]`` when complete.
    ``invoked``: that highest seq per key when the history was read without its invokes
    (:class:`InvokedSeqs`), else taken from ``hist``'s invoke rows."""
    why = "acknowledged sends could not be checked against the input (lost-write)"
    path = stored(path)  # history.jsonl.gz once the run is compacted
    if not path.exists():
        return [f"{path.name} is missing: {why}"]
    if hist.empty:
        return [f"{path.name} is empty: {why}"]
    if inp.empty or not {"type", "key", "seq"} <= set(hist.columns):
        return [] if inp.empty else [f"{path.name} has no send ops: {why}"]
    if invoked is None:
        inv = _invokes(hist)
        invoked = _top_seq(hist["key"][inv], hist["seq"][inv])
    ik, ikeys = exactly_once.factorize_str(inp["key"])
    at = invoked.index.get_indexer(pd.Index(ikeys, dtype=object))  # each input key's place in invoked, -1: none
    top = invoked.to_numpy(dtype=float)
    bound_of = np.where(at >= 0, top[np.maximum(at, 0)], np.nan) if len(top) else np.full(len(ikeys), np.nan)
    n, first_at = 0, -1
    for a, b in row_blocks(len(inp)):  # a block at a time: no float per input record is kept
        bound = bound_of[ik[a:b]]
        seq_in = pd.to_numeric(inp["seq"].iloc[a:b], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        beyond = ~np.isnan(seq_in) & (np.isnan(bound) | (seq_in > bound))
        k = int(np.count_nonzero(beyond))
        if k and first_at < 0:
            first_at = a + int(np.flatnonzero(beyond)[0])
        n += k
    if not n:
        return []
    first = inp.iloc[first_at]
    return [f"{path.name} ends before the input does: {n} input records (e.g. key {first['key']} seq "
            f"{first['seq']}) have no send in it, so it was cut short and {why.split(' could')[0]} could "
            "not all be checked (lost-write)"]


def _history_unknown(result: dict, reasons: list[str]) -> dict:
    """A result whose lost-write check was incomplete: ``valid`` becomes ``unknown`` with ``reasons``;
    ``invalid`` stays (its anomalies do not depend on the history) and gets ``reasons`` as ``warnings``."""
    if result["verdict"] == "valid":
        result.update(verdict="unknown", valid="unknown",
                      unknown_reasons=list(result.get("unknown_reasons") or []) + reasons)
    elif result["verdict"] == "unknown":
        result["unknown_reasons"] = list(result.get("unknown_reasons") or []) + reasons
    else:
        result.setdefault("warnings", []).extend(reasons)
    return result


def _input_moved(result: dict, reason: str) -> dict:
    """The input grew between the caught-up test and the read: ``lost`` and ``unexpected`` may be
    artefacts of the window, so an ``invalid`` resting only on them becomes ``unknown``."""
    counts = result.get("counts", {})
    definite = set(compose.DEFINITE) | set(result.get("definite") or ())
    firm = any(counts.get(a) for a in definite if a != "unexpected")
    if result["verdict"] == "invalid" and not firm:
        result.update(verdict="unknown", valid="unknown",
                      unknown_reasons=list(result.get("unknown_reasons") or []) + [reason])
    else:
        result.setdefault("warnings", []).append(reason)
    return result


def run_checks(hist: pd.DataFrame, inp: pd.DataFrame, out: pd.DataFrame, rec: Recovery, *,
               sink_log: pd.DataFrame | None = None, uncommitted: pd.DataFrame | None = None,
               live: pd.DataFrame | None = None, lso: dict | None = None, hw: dict | None = None,
               nemesis: pd.DataFrame | None = None, workload: str = "keyed",
               aborted_hidden: int | None = None, lso_samples: pd.DataFrame | None = None,
               bounds: liveness.Bounds = liveness.Bounds(), strict: bool = False,
               driver_starts: list[float] | None = None) -> dict:
    """Every checker on already-read frames; the one place the composition is decided: the workload's
    checker (``workloads/registry.py``), then the transaction checks (``checkers/compose.py``), then the
    faults near each anomaly, then the likely cause and fix of each (``checkers/advice.py``).
    ``aborted_hidden``: ``transactions.hidden_aborted`` already counted (the uncommitted frame dropped),
    instead of ``uncommitted``. ``lso_samples`` and ``bounds``: the output's
    LSO/HW samples and the bounds the liveness checker (``checkers/liveness.py``) judges them by.
    ``strict``: the input log's anomalies (platform findings, ``checkers/platform.py``) count in the verdict.
    ``driver_starts``: epoch s of each driver's query start, for the leftover-transaction check."""
    inp, deleted = with_deleted_input(inp, hist, nemesis)
    base = workloads.get(workload).check(hist, inp, out, rec)
    base["workload"] = workload
    if deleted:
        base.setdefault("stats", {})["deleted_input_records"] = deleted
    release_freed_memory()  # the checker's per-record tables, before the next checks allocate theirs
    seen = None if live is None else transactions.distinct_positions(live)
    result = compose.combine(base, output=out, sink_log=sink_log, uncommitted=uncommitted, live=live, lso=lso,
                             hw=hw, aborted_hidden=aborted_hidden,
                             live_check=liveness.check(seen, lso_samples, nemesis, bounds, driver_starts,
                                                       _append_ms(inp)),
                             strict=strict, live_distinct=seen)
    stopped = [r.removeprefix(QUERY_STOPPED) for r in rec.reasons if r.startswith(QUERY_STOPPED)]
    if stopped:  # kept whatever the verdict (unknown_reasons are dropped from an invalid one)
        result["query_stopped"] = stopped[0]
    return advice.attach(nearby.attach(result, out, inp, nemesis))


def with_deleted_input(inp: pd.DataFrame, hist: pd.DataFrame, nemesis: pd.DataFrame | None
                       ) -> tuple[pd.DataFrame, int]:
    """The input as it was before ``delete-input-records`` turns cut its log start, and how many records
    they deleted unread: the history's ``ok`` sends at the offsets a turn deleted before the query read
    them (``nemesis.delete_records.deleted_ranges``) are added back, with
    :data:`~onceproof.checkers.exactly_once.DELETED_BY` naming the turn (NA for the records read from
    the topic), so the checker owes them and reports their loss as ``lost-deleted``. ``inp`` itself
    when nothing was deleted."""
    if nemesis is None or nemesis.empty or hist.empty or not {"partition", "offset"} <= set(hist.columns):
        return inp, 0
    ranges = delete_records.deleted_ranges(nemesis.to_dict("records"))
    if not ranges:
        return inp, 0
    ok = hist[(hist["type"] == "ok") & (hist["f"] == "send")]
    part = pd.to_numeric(ok["partition"], errors="coerce")
    off = pd.to_numeric(ok["offset"], errors="coerce")
    parts = []
    for p, lo, hi in ranges:
        m = (part == p) & (off >= lo) & (off < hi)
        parts.append(pd.DataFrame({"key": ok["key"][m].astype(str).to_numpy(),
                                   "seq": pd.to_numeric(ok["seq"][m]).astype("int64").to_numpy(),
                                   "partition": part[m].astype("int64").to_numpy(),
                                   "offset": off[m].astype("int64").to_numpy(),
                                   exactly_once.DELETED_BY: f"delete-input-records: partition {p}, offsets "
                                                            f"[{lo}, {hi})"}))
    gone = pd.concat(parts, ignore_index=True).drop_duplicates(["partition", "offset"])
    if gone.empty:
        return inp, 0
    # records still in the read input (none, unless a read raced the deletion): looked up within the ranges
    ip, io = inp["partition"].to_numpy(dtype=np.int64), inp["offset"].to_numpy(dtype=np.int64)
    inside = np.zeros(len(inp), bool)
    for p, lo, hi in ranges:
        inside |= (ip == p) & (io >= lo) & (io < hi)
    have = set(zip(ip[inside].tolist(), io[inside].tolist()))
    gone = gone[[(p, o) not in have for p, o in zip(gone["partition"], gone["offset"])]]
    base = inp.assign(**{exactly_once.DELETED_BY: None})
    if "key" in base.columns:
        base["key"] = base["key"].astype(str)
    return pd.concat([base, gone], ignore_index=True), int(len(gone))


def stored_liveness(run_dir: Path, nemesis: pd.DataFrame | None) -> dict:
    """The liveness checker's result for a stored run, from its files alone: the reader's view
    (``live.parquet``: partition, offset, in_ts, seen_ms), ``lso.parquet``, the input's append times
    (``input.parquet``'s ``timestamp`` column), the driver starts and the config's bounds. For the Spark
    engine, whose frames are not pandas: only these four narrow columns are read (8 bytes a record each).

    Raises: ``CheckError`` naming a damaged file."""
    files = RunFiles(run_dir)

    def cols(path: Path, want: list[str]) -> pd.DataFrame | None:
        if not path.exists():
            return None
        try:
            have = set(pq.ParquetDataset(path).schema.names)  # a file, or a directory of part files
            return pd.read_parquet(path, columns=[c for c in want if c in have])
        except (OSError, ValueError) as e:
            raise CheckError(f"{path} cannot be read ({e}); the run directory is damaged") from e

    live = cols(files.live, ["partition", "offset", "in_ts", "seen_ms"])
    inp = cols(files.input, ["timestamp"])
    seen = None if live is None else transactions.distinct_positions(live)
    return liveness.check(seen, _read(readers.read_lso, run_dir), nemesis, _bounds(run_dir),
                          readers.read_driver_starts(run_dir), None if inp is None else _append_ms(inp))


def _append_ms(inp: pd.DataFrame) -> np.ndarray | None:
    """The input records' Kafka timestamps (epoch ms), ``None`` when the frame has none."""
    if "timestamp" not in inp.columns:
        return None
    return pd.to_numeric(inp["timestamp"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def probe(bootstrap: str, *topic_names: str, timeout_s: float = 10.0) -> None:
    """Fail fast, in one line, when ``bootstrap`` does not answer within ``timeout_s`` seconds or a topic
    is missing.

    Raises: ``CheckError`` naming the address or the topic (and the option that sets it).
    """

    try:
        md = topics.admin(bootstrap).list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise CheckError(f"Kafka at {bootstrap} did not answer within {timeout_s:g}s ({e.args[0]}): "
                         "check --bootstrap") from e
    for opt, t in zip(("--input-topic", "--output-topic"), topic_names):
        tm = md.topics.get(t)
        if tm is None or tm.error is not None:
            raise CheckError(f"topic {t!r} not found on {bootstrap}: check {opt}")


def live_offsets(bootstrap: str, input_topic: str, output_topic: str,
                 st: RecoveryStatus) -> tuple[dict, dict, str | None]:
    """After a live read: the output's LSO and high watermark per partition (``st``'s, else looked up)
    and, when the input's end offsets moved since ``st`` was taken, why the check may be early."""
    lso = st.output_lso or topics.end_offsets(bootstrap, output_topic, committed=True)
    hw = st.output_hw or topics.end_offsets(bootstrap, output_topic, committed=False)
    moved = None
    if st.input_end:
        try:
            now = topics.end_offsets(bootstrap, input_topic, committed=True)
        except Exception:  # noqa: BLE001 - a second look failed; the check itself stands
            now = st.input_end
        if now != st.input_end:
            moved = (f"the input grew while checking ({sum(st.input_end.values())} → {sum(now.values())} "
                     "records): a producer is still writing; stop it, or pass --settle so the check waits "
                     "for a quiet input")
    return lso, hw, moved


def save_recovery(files: RunFiles, rec: Recovery, st: RecoveryStatus, lso: dict, hw: dict) -> None:
    """``recovery.json`` of a live check (``onceproof.store.readers.read_recovery`` reads it)."""
    files.recovery.write_text(json.dumps(
        {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds,
         "input_end": st.input_end, "consumed": st.consumed, "output_lso": lso, "output_hw": hw}, indent=2))


def saved_recovery(run_dir: Path) -> tuple[Recovery, dict | None, dict | None]:
    """``recovery.json`` as (recovery, output LSO, output high watermark per partition); a finished
    recovery and ``None`` offsets when it is absent.

    Raises: ``CheckError`` naming the file when it is damaged.
    """
    rec, lso, hw = Recovery(), None, None
    r = _read(readers.read_recovery, run_dir)
    if r is not None:
        try:
            rec = Recovery(bool(r["finished"]), list(r.get("reasons") or []))
            lso = {int(k): int(v) for k, v in (r.get("output_lso") or {}).items()}
            hw = {int(k): int(v) for k, v in (r.get("output_hw") or {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckError(f"{RunFiles(run_dir).recovery} is damaged ({type(e).__name__}: {e})") from e
    return rec, lso, hw


def check_live(bootstrap: str, input_topic: str, output_topic: str, run_dir: Path | None,
               st: RecoveryStatus, live: pd.DataFrame | None = None, workload: str = "keyed",
               file_sink: Path | None = None, file_read: str = COMMITTED, reader: OutputReader | None = None,
               lso_samples: pd.DataFrame | None = None, strict: bool | None = None, dsn: str = "",
               order_column: str = "") -> dict:
    """Read, save (when ``run_dir`` is given) and check. Returns the combined result plus ``recovery``.

    The output is read by ``reader`` (the run's sink entry's, ``sinks/base.py``) at ``output_topic`` or,
    for a sink that writes a directory, ``file_sink``, the view ``file_read`` names; without ``reader``:
    Spark's file sink when ``file_sink`` is given (``check --file-sink``), else the output topic at
    read_committed. ``dsn``: the database of a sink that writes a table (named like ``output_topic``).
    ``order_column``: the table's declared order column (``--order-column``).

    When ``run_dir`` holds a run of our workload, a missing, empty or cut-short ``history.jsonl`` makes a
    valid verdict ``unknown``. When the input's end offsets moved after ``st`` was taken (a producer
    still writing), an invalid verdict resting only on ``lost``/``unexpected`` becomes ``unknown``.

    ``lso_samples``: the output's LSO/HW through the run (``clients/lso_sampler.py``), saved and judged
    with the liveness bounds of the run's ``test.json`` config. ``strict``: platform findings count in the
    verdict (``None``: as that config says).

    Raises: ``CheckError`` when the output cannot be read (a damaged file sink log, ...).
    """
    reader = reader or (file_log.read_output if file_sink is not None else kafka_topic.read_output)
    inp, reasons = read_input(bootstrap, input_topic)
    view = read_output(reader, OutputLocation(bootstrap, output_topic, directory=file_sink, workload=workload,
                                              read=file_read, dsn=dsn, order_column=order_column))
    out, unc, reasons = view.committed, view.uncommitted, reasons + view.unsettled
    view.committed = view.uncommitted = None  # the frames are freed as the check drops them
    files = RunFiles(run_dir) if run_dir else None
    with Snapshots(files) if files else contextlib.nullcontext() as snaps:
        # the uncommitted read is only counted against the committed one: saved, then dropped
        hidden = transactions.hidden_aborted(unc, out)
        if snaps:
            snaps.write(OUTPUT_UNCOMMITTED, unc)
        del unc
        release_freed_memory()
        problems: list[str] = []
        invoked = InvokedSeqs()
        hist = (_read(readers.read_history, run_dir, problems, HISTORY_COLUMNS, invoked, True) if run_dir
                else pd.DataFrame())
        rec = Recovery(finished=st.finished and not reasons, reasons=st.reasons + reasons)
        lso, hw, moved = live_offsets(bootstrap, input_topic, output_topic, st)
        if snaps:
            snaps.write(INPUT, inp)
            snaps.write(OUTPUT, out)
            if live is not None:
                snaps.write(LIVE, live)
            if lso_samples is not None:
                snaps.write(LSO, lso_samples)
            snaps.commit()
            save_recovery(files, rec, st, lso, hw)
        _drop_snapshot_only(inp, out)
        release_freed_memory()  # the parquet writer's buffers, the dropped columns
    nem = _read(readers.read_nemesis, run_dir, problems) if files and files.nemesis.exists() else None
    config = _config(run_dir)
    result = run_checks(hist, inp, out, rec, sink_log=_sink_log(run_dir), aborted_hidden=hidden, live=live,
                        lso=lso, hw=hw, nemesis=nem, workload=workload, lso_samples=lso_samples,
                        bounds=liveness.Bounds.of(config),
                        strict=bool(config.get("strict")) if strict is None else strict,
                        driver_starts=readers.read_driver_starts(run_dir) if run_dir else None)
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds}
    view.record(result)
    return _judge_inputs(result, run_dir, problems, hist, inp, invoked, moved)


def _config(run_dir: Path | None) -> dict:
    """The config of the run in ``run_dir`` (its ``test.json``), ``{}`` without one."""
    test = readers.read_or_none(readers.read_test, run_dir) if run_dir else None
    return (test or {}).get("config") or {}


def _bounds(run_dir: Path | None) -> liveness.Bounds:
    """The liveness bounds of the run in ``run_dir``, defaults without a config."""
    return liveness.Bounds.of(_config(run_dir))


def _judge_inputs(result: dict, run_dir: Path | None, problems: list[str], hist: pd.DataFrame, inp: pd.DataFrame,
                  invoked: InvokedSeqs, moved: str | None) -> dict:
    """The check's inputs' own problems on ``result``: ``problems`` as warnings, a history that cannot
    back the lost-write check (:func:`history_gaps`, for a run of our workload), and an input that
    ``moved`` while it was read (:func:`_input_moved`)."""
    if problems:
        result.setdefault("warnings", []).extend(problems)
    if workload_ran(run_dir):
        gaps = history_gaps(RunFiles(run_dir).history, hist, inp, invoked.top())
        if gaps:
            _history_unknown(result, gaps)
    if moved:
        _input_moved(result, moved)
    return result


def _saved_output(run_dir: Path, config: dict, file_read: str | None, replay: str,
                  damaged: str) -> tuple[pd.DataFrame, pd.DataFrame, OutputView | None]:
    """A stored run's output ``(committed, uncommitted, view)``: read again from the sink's output
    directory (a sink entry with an ``output_dir``, the way ``file_read`` says; default: as the run read
    it), else from the topic snapshots (``view`` is then ``None``).

    Raises: ``CheckError`` when the directory is gone, ``file_read`` is not a read the sink offers, or a
    snapshot is damaged."""
    sink = user_outputs.entry_of(config)
    if sink is not None and sink.output_dir:  # the output is read again from the directory, not the snapshots
        read = file_read or str(config.get("file_read") or COMMITTED)
        directory = run_dir / sink.output_dir
        if not directory.is_dir():
            raise CheckError(f"{directory} is gone: the {sink.name} sink's output cannot be read again{_rerun(replay)}")
        view = read_output(sink.read, OutputLocation(directory=directory, workload=str(config.get("workload")
                                                                                        or "keyed"), read=read,
                                                     order_column=str(config.get("order_column") or "")))
        return view.committed, view.uncommitted, view
    if file_read and file_read != COMMITTED:
        raise CheckError(f"{run_dir} is not a --sink file run: --file-read applies to file sinks only")
    return (_read(readers.read_output, run_dir, advice=damaged),
            _read(readers.read_output_uncommitted, run_dir, advice=damaged), None)


def check_saved(run_dir: Path, file_read: str | None = None) -> dict:
    """Re-check a stored run from its parquet snapshots, ``history.jsonl``, ``sink.jsonl`` and
    ``recovery.json``. A run whose sink writes a directory (``--sink file``: ``file-sink/``) has its output
    read again from there by the sink's reader, the way ``file_read`` says (``committed`` or ``listing``;
    default: as the run read it).

    A run of our workload (a ``test.json`` not of kind ``check``) whose ``history.jsonl`` is missing,
    empty or cut short gets at best ``unknown`` (the lost-write check could not run); a torn last line of
    a history is dropped and listed in ``warnings``.

    Raises: ``CheckError`` in one line naming the file: no topic snapshots (a run that crashed before its
    check; the message gives the replay command from ``test.json``), or a damaged parquet file,
    ``recovery.json``, ``test.json`` or history.
    """
    files = RunFiles(run_dir)
    test = _read(readers.read_test, run_dir) or {}
    replay = str(test.get("replay") or "")
    missing = [n for n in (INPUT, OUTPUT) if not (files / n).exists()]
    if missing:
        err = (readers.read_or_none(readers.read_results, run_dir) or {}).get("error")
        why = f" (its error: {err})" if err else ""
        advice = (f"re-run it with `{replay}`" if replay else
                  "nothing was saved to re-check; run the test again")
        raise CheckError(f"{run_dir} has no {', '.join(missing)}: the run ended before its check{why}; "
                         f"{advice}")
    damaged = f"; the run directory is damaged{_rerun(replay)}"
    inp = _read(readers.read_input, run_dir, advice=damaged)
    config = test.get("config") or {}
    out, unc, view = _saved_output(run_dir, config, file_read, replay, damaged)
    hidden = transactions.hidden_aborted(unc, out)  # all the uncommitted view is used for
    del unc
    rec, lso, hw = saved_recovery(run_dir)
    problems: list[str] = []
    invoked = InvokedSeqs()
    hist = _read(readers.read_history, run_dir, problems, HISTORY_COLUMNS, invoked, True)
    nem = _read(readers.read_nemesis, run_dir, problems)
    result = run_checks(hist, inp, out, rec, sink_log=_sink_log(run_dir),
                        aborted_hidden=hidden, live=_read(readers.read_live, run_dir, advice=damaged), lso=lso, hw=hw,
                        nemesis=nem, workload=str(config.get("workload") or "keyed"),
                        lso_samples=_read(readers.read_lso, run_dir, advice=damaged),
                        bounds=liveness.Bounds.of(config), strict=bool(config.get("strict")),
                        driver_starts=readers.read_driver_starts(run_dir))
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons}
    if view is not None:
        view.committed = view.uncommitted = None
        view.record(result)
    result = _judge_inputs(result, run_dir, problems, hist, inp, invoked, None)
    if workload_ran(run_dir):
        # the same coverage judgement as the run itself: a re-check must not turn "a planned fault was
        # never exercised" back into valid
        ops = nem.to_dict("records") if len(nem) else []
        result = coverage.judge(result, [tuple(x) for x in test.get("schedule") or []], ops,
                                stored_workload_stop(run_dir))
    return result


def stored_workload_stop(run_dir: Path) -> str | None:
    """When the stored run's workload stopped sending before its run phase ended, as the run's
    ``results.json`` recorded it in ``workload_stopped`` (``"HH:MM:SS <exception>"``, the client's
    ``stopped_by``), what ``coverage.judge`` takes, so that a re-check judges the run as the run did.
    ``None`` without one, or without a readable ``results.json``."""
    stored_result = readers.read_or_none(readers.read_results, run_dir) or {}
    stop = stored_result.get("workload_stopped")
    return stop if isinstance(stop, str) and stop else None
