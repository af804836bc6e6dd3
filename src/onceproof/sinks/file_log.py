"""Read a Spark file sink's output (JSON lines) through its commit log, ``<dir>/_spark_metadata``.

``df.writeStream.format("json").option("path", DIR)`` (Spark's ``FileStreamSink``) writes data files
straight to their final names in ``DIR`` (``part-<split>-<uuid>-c000.json``) and, per micro-batch ``N``,
commits them by writing the log file ``DIR/_spark_metadata/N``; every ``compactInterval``-th batch
(``spark.sql.streaming.fileSink.log.compactInterval``, default 10: 9, 19, 29, ...) is written as
``N.compact`` instead, which holds the entries of every batch 0..N. So there are two views of ``DIR``,
like Kafka's two isolation levels:

* **committed** (the sink's read_committed): only the files the log lists. This is what Spark's own
  readers see (``MetadataLogFileIndex``) and the view that must be exactly-once.
* **listing** (read_uncommitted): every data file in ``DIR``. It also holds **orphans**, files that no
  log entry lists: partial files of killed tasks, a speculative attempt's copy, every file of a batch
  whose driver died before ``_spark_metadata/N`` existed (the batch is re-run with fresh UUIDs). Spark
  never deletes them, so the listing is at-least-once and may contain torn lines.

Log file format (``CompactibleFileStreamLog.serialize``; a real Spark 4.3.0 ``local[1]`` run made the
same bytes): the line ``v1``, then per entry ``"\\n"`` + one JSON ``SinkFileStatus``
(``{"path","size","isDir","modificationTime","blockReplication","blockSize","action"}``), with no
trailing newline; a batch that committed no file is the 2 bytes ``v1``. ``path`` is a URL-encoded URI
(``SparkPath.urlEncoded``): the Spark 4.3.0 run wrote ``file:///abs/dir/part-....json`` with a space as
``%20`` and ``%`` as ``%25`` (Hadoop's ``file:/abs/...`` form is read the same way).

The file sink's reader (:func:`read_output`, ``onceproof.sinks.files``) reads through this module.

API: :func:`read_log` (the log as read: :class:`SinkLog`), :func:`committed_files`,
:func:`all_data_files`, :func:`orphan_files`, :func:`read_records` (data files → checker output rows),
:func:`committed_view` / :func:`listing_view` (the two views as such rows) and :func:`stats` (counts).

How the committed set is worked out (the rules of ``CompactibleFileStreamLog.allFiles`` +
``MetadataLogFileIndex``; sources with line numbers: ``docs/research/issue9/spark-file-sink.md`` §1.2-1.7):

* Log files are the names ``<digits>`` and ``<digits>.compact`` that are regular files; everything else
  in ``_spark_metadata`` is ignored, as Spark ignores it (``isBatchFile``): ``.N.crc`` checksums and
  the hidden temp file ``.N.<uuid>.tmp`` a driver killed while writing ``N`` leaves behind.
* The last batch is the highest id (``getLatestBatchId`` lists, it does not read). Reading starts at
  the newest ``.compact`` (batch 0 without one) and takes every id from there to the last; older
  deltas and compacts are superseded (they stay on disk for ``fileSink.log.cleanupDelay``, 10 min, and
  ``minBatchesToRetain``, 100 batches). A missing id in that range is an error, as in Spark
  (``"... doesn't exist"``). This does not need ``compactInterval``: for a log Spark wrote, the newest
  compact is exactly where ``getAllValidBatches`` starts.
* Entries are applied in order, keyed by local path: a path listed again keeps its first place in
  commit order and takes the newer entry's fields, as Spark's ``LinkedHashMap`` does; ``isDir``
  entries are dropped.
* ``action``: Spark 3.1+ never writes ``"delete"`` and ignores ``action`` altogether (SPARK-30462);
  2.x-3.0 honoured it. Here ``"delete"`` removes the path by default (``honour_delete=False`` for
  the 3.1+ rule), and every such entry is counted in :func:`stats`: Spark never wrote one (SPARK-30462:
  the delete condition "has been never true"), so seeing one means a hand-edited or foreign log.

Damaged log files. Spark writes each log file to a hidden temp file and renames it into place
(``HDFSMetadataLog.write`` → ``CheckpointFileManager.createAtomic``, no overwrite), so on a local
filesystem or HDFS a visible ``N`` is never half-written: the only partial log a kill leaves is the
ignored ``.N.<uuid>.tmp``. Spark's reader does **not** tolerate a damaged visible file: an empty one
fails with ``IllegalStateException("Incomplete log file")``, a bad header with ``malformedLogFile`` /
``logVersionGreaterThanSupported``, an unparsable entry line with json4s' parse error, i.e. every query
reading the directory fails (``CompactibleFileStreamLog.deserialize`` / ``applyFnInBatch``, read at
apache/spark@0df45d39; ``HDFSMetadataLog.applyFnToBatchByStream`` at @00ef5c13). So a
visible torn file means a non-atomic store, a manual copy or a bug, and the committed view is undefined.
By default (``torn_last="raise"``) this reader fails the same way, with :class:`FileSinkLogError`.
``torn_last="skip"`` is the one tolerance offered: when the **last** log file is empty or its **last**
line is cut off (what an interrupted non-atomic write looks like) that batch is treated as never
committed (its files become orphans) and :func:`stats` reports it as ``torn_log``. Damage anywhere
else (an earlier file, a line before the last, a missing or unknown version header) always raises: an
interrupted write cannot produce it. A trailing ``"\\n"`` is accepted (Scala's ``getLines`` ignores it).

Errors: :class:`FileSinkLogError` (a ``ValueError``), its message naming the file and the fix.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pandas as pd

from onceproof.clients.topics import decode_values  # the checker's JSON decoding (fast path, same NA rules)
from onceproof.sinks import table_rows
from onceproof.sinks.base import COMMITTED, ORDER_RANK, OutputError, OutputLocation, OutputView
from onceproof.spans import spans

log = logging.getLogger("onceproof.sinks")

METADATA_DIR = "_spark_metadata"  # FileStreamSink.metadataDir
COMPACT_SUFFIX = ".compact"  # CompactibleFileStreamLog.COMPACT_FILE_SUFFIX
VERSION = 1  # FileStreamSinkLog.VERSION: the highest log version Spark (and this reader) knows
INPUT_REF = "op.input"  # checkers/exactly_once.py INPUT_REF (pipeline/provenance.py INPUT)
# Spark parses a batch id with String.toLong, which would also take "+3" or "-3"; Spark never writes those.
_BATCH_RE = re.compile(r"^(\d+)(\.compact)?$")
_VERSION_RE = re.compile(r"^v(\d+)$")
_RETRIES = 3  # re-listings when a log file vanishes while being read (a concurrent compaction's cleanup)
# Compressed outputs this reader does not decode (Spark's json "compression" option; gzip is read).
_UNREADABLE = (".bz2", ".lz4", ".snappy", ".deflate", ".zst")
# Columns read_records makes; a JSON field of the same name is kept as "json_<name>".
_OWN = ("partition", "offset", "file", "line")


class FileSinkLogError(ValueError):
    """The directory is not a Spark file sink's output, or its ``_spark_metadata`` log cannot be read
    the way Spark reads it. The message names the file and what to do."""


@dataclass
class LogEntry:
    """One committed data file: the log file that (last) listed it, its URI as stored and its logged size
    (bytes; ``None`` when the entry has none)."""

    batch: int
    log_file: str
    uri: str
    size: int | None


@dataclass
class SinkLog:
    """A ``_spark_metadata`` log as read. ``files`` maps each committed data file's local path (resolved)
    to its entry, in commit order (batch order, then entry order); ``last_batch`` is the highest batch
    id in the log (``None`` for an empty log); ``log_files`` the names read, in order; ``deleted`` the
    number of ``"delete"`` entries met; ``torn_log`` the name of a torn last log file that was skipped
    (``torn_last="skip"``); ``problems`` one sentence per oddity that did not stop the read."""

    directory: Path
    last_batch: int | None = None
    log_files: list[str] = field(default_factory=list)
    files: dict[Path, LogEntry] = field(default_factory=dict)
    deleted: int = 0
    torn_log: str | None = None
    problems: list[str] = field(default_factory=list)


class _Torn(Exception):
    """A log file that is empty or whose last line is cut off (what an interrupted write leaves)."""


# ------------------------------------------------------------------------------------------- the log


def read_log(path: str | os.PathLike, *, remap: Mapping[str, str] | None = None, honour_delete: bool = True,
             torn_last: str = "raise") -> SinkLog:
    """Read ``path/_spark_metadata``: the committed file set as of its newest valid state (module
    docstring for the rules and where they come from).

    ``path`` is the directory given to ``writeStream...option("path", ...)``. ``remap`` maps a path
    prefix as Spark saw it to where it is here (``{"/data/out": "/home/me/run/out"}``), for when Spark ran
    in a container: the log holds the executors' absolute paths. ``honour_delete``: a ``"delete"`` entry
    removes its path (Spark 2.x) or, when false, is ignored (Spark 3.1+). ``torn_last``: ``"raise"``
    (Spark's behaviour) or ``"skip"`` (a torn last log file is a batch never committed).

    Raises: :class:`FileSinkLogError` when ``path`` has no ``_spark_metadata``, a log file in the range
    to read is missing or damaged, a version header is missing or newer than v1, or an entry names a
    non-local URI.
    """
    if torn_last not in ("raise", "skip"):
        raise ValueError(f"torn_last={torn_last!r}: use 'raise' or 'skip'")
    root = Path(os.path.realpath(path))
    meta = root / METADATA_DIR
    if not meta.is_dir():
        raise FileSinkLogError(
            f"{root} has no {METADATA_DIR} directory: this is not a Spark file-sink output directory; point "
            f"--file-sink at the directory given to writeStream...option('path', ...) (the one holding the "
            f"part-*.json files and {METADATA_DIR}/), not at a sub-directory or the checkpoint")
    for attempt in range(_RETRIES + 1):
        batches = _list_batches(meta)
        try:
            return _read(root, meta, batches, remap or {}, honour_delete, torn_last)
        except FileNotFoundError as e:
            # Spark's allFiles: a compaction's cleanup may delete the files we are reading; re-list and
            # go on from the newer compact file if one appeared, else it is a real loss.
            again = _list_batches(meta)
            if attempt == _RETRIES or _newest_compact(again) == _newest_compact(batches):
                raise FileSinkLogError(
                    f"{e.filename} vanished while being read and no newer .compact file appeared: the log "
                    f"is being deleted by something other than Spark's compaction; stop it and re-run") from e
    raise AssertionError("unreachable")


def _list_batches(meta: Path) -> dict[int, list[str]]:
    """Batch id → the names of its log files (``N`` and/or ``N.compact``), regular files only."""
    out: dict[int, list[str]] = {}
    with os.scandir(meta) as it:
        for d in it:
            m = _BATCH_RE.match(d.name)
            if m and d.is_file():
                out.setdefault(int(m.group(1)), []).append(d.name)
    return out


def latest_batch(path: str | os.PathLike) -> int | None:
    """The highest batch id with a log file (``N`` or ``N.compact``) in ``<path>/_spark_metadata``, or
    ``None`` when there is none or no such directory. One directory listing: cheap enough to poll."""
    try:
        batches = _list_batches(Path(path) / "_spark_metadata")
    except FileNotFoundError:
        return None
    return max(batches) if batches else None


def _newest_compact(batches: dict[int, list[str]]) -> int | None:
    ids = [b for b, names in batches.items() if any(n.endswith(COMPACT_SUFFIX) for n in names)]
    return max(ids) if ids else None


def _read(root: Path, meta: Path, batches: dict[int, list[str]], remap: Mapping[str, str],
          honour_delete: bool, torn_last: str) -> SinkLog:
    out = SinkLog(directory=root)
    if not batches:
        return out  # the sink exists (Spark makes the directory at start) but has committed nothing yet
    last = max(batches)
    for b in sorted(batches):
        if len(batches[b]) > 1:
            out.problems.append(f"{meta}: batch {b} has both {b} and {b}{COMPACT_SUFFIX}; the .compact one is read")
    # Parse the files newest first only as far as needed to know whether the last one is torn.
    parsed: dict[int, list[dict]] = {}
    name_of = {b: next((n for n in ns if n.endswith(COMPACT_SUFFIX)), ns[0]) for b, ns in batches.items()}
    try:
        parsed[last] = _parse_log_file(meta / name_of[last])
    except _Torn as e:
        if torn_last == "raise":
            raise FileSinkLogError(
                f"{meta / name_of[last]} is {e}: Spark's own reader fails on this file too ('Incomplete log "
                f"file' or a JSON parse error), so the committed view is undefined. Spark writes log files "
                f"atomically (temp file + rename), so this comes from a non-atomic store, a copy or an edit; "
                f"pass torn_last='skip' to treat batch {last} as never committed") from None
        out.torn_log = name_of[last]
        out.problems.append(f"{meta / name_of[last]} is {e}; batch {last} is treated as never committed")
        del batches[last]
        if not batches:
            return out
        last = max(batches)
    newest_compact = _newest_compact({b: [name_of[b]] for b in batches})
    start = newest_compact if newest_compact is not None else 0
    gaps = [b for b in range(start, last + 1) if b not in batches]
    if gaps:
        raise FileSinkLogError(
            f"{meta}: log files for batches {spans(gaps)} are missing (reading {start}..{last}, from "
            f"{'the newest compact file' if newest_compact is not None else 'batch 0: there is no .compact file'}"
            f"); Spark's reader fails the same way ('... doesn't exist'). The log was damaged or partly "
            f"deleted: restore the files or re-run the job on a fresh output directory and checkpoint")
    out.last_batch = last
    for b in range(start, last + 1):
        name = name_of[b]
        out.log_files.append(name)
        try:
            entries = parsed[b] if b in parsed else _parse_log_file(meta / name)
        except _Torn as e:
            raise FileSinkLogError(f"{meta / name} is {e}, and it is not the last log file: the log is corrupt "
                                   f"(Spark fails on it too); restore it or re-run on a fresh directory") from None
        for i, entry in enumerate(entries):
            _apply(out, b, name, i, entry, remap, honour_delete)
    return out


def _parse_log_file(p: Path) -> list[dict]:
    """One log file → its entries. Raises :class:`_Torn` for what an interrupted write leaves (empty
    file, cut-off last line), :class:`FileSinkLogError` for anything else Spark refuses."""
    data = p.read_bytes()  # FileNotFoundError goes up: read_log re-lists
    if not data:
        raise _Torn("empty (0 bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start >= len(data) - 3 and b"\n" in data[:e.start] and b"\n" not in data[e.start:]:
            raise _Torn("cut off inside a UTF-8 character of its last line") from None
        raise FileSinkLogError(f"{p} is not UTF-8 text ({e}): not a Spark sink log file; remove it or "
                               "restore it") from e
    lines = text.split("\n")
    if lines[-1] == "":  # a trailing newline (Spark writes none; getLines would ignore it)
        lines.pop()
    lines = [ln.removesuffix("\r") for ln in lines]
    head = lines[0] if lines else ""
    m = _VERSION_RE.match(head)
    if not m or int(m.group(1)) == 0:
        if len(lines) == 1 and "v1".startswith(head):  # "v" alone: the header itself was cut off
            raise _Torn(f"cut off in its version line ({head!r})")
        raise FileSinkLogError(
            f"{p} does not start with a version line 'v1' (it starts {head[:60]!r}): not a Spark file-sink log "
            f"file (Spark: malformedLogFile); remove it from {p.parent} or restore the original")
    if int(m.group(1)) > VERSION:
        raise FileSinkLogError(
            f"{p} is log version v{m.group(1)}, this reader knows v{VERSION} only (Spark: "
            f"logVersionGreaterThanSupported): it was written by a newer Spark; teach "
            f"sinks/file_log.py the new format, or write the output with a Spark that writes v1")
    entries = []
    for i, ln in enumerate(lines[1:], start=1):
        try:
            obj = json.loads(ln)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("path"), str):
            entries.append(obj)
            continue
        if i == len(lines) - 1 and obj is None:
            raise _Torn(f"cut off in its last line (line {i + 1}: {ln[:60]!r})")
        raise FileSinkLogError(f"{p}:{i + 1} is not a JSON SinkFileStatus with a 'path' ({ln[:80]!r}): the log "
                               f"file is corrupt (Spark fails on it too); restore it or re-run on a fresh "
                               f"directory")
    return entries


def _apply(out: SinkLog, batch: int, name: str, i: int, e: dict, remap: Mapping[str, str],
           honour_delete: bool) -> None:
    local = uri_to_path(e["path"], remap)
    action = e.get("action", "add")
    if action == "delete":
        out.deleted += 1
        if honour_delete:
            out.files.pop(local, None)
            return
    elif action != "add":
        out.problems.append(f"{METADATA_DIR}/{name} entry {i + 1}: unknown action {action!r} for {local} "
                            f"(read as 'add', as Spark 3.1+ does)")
    if e.get("isDir"):  # MetadataLogFileIndex drops directories
        return
    prev = out.files.get(local)  # a re-listed file keeps its first place, as in Spark's LinkedHashMap
    if prev is not None and prev.batch != batch:
        out.problems.append(f"{local} is listed by {METADATA_DIR}/{prev.log_file} and again by {name}")
    size = e.get("size")
    out.files[local] = LogEntry(batch, name, e["path"], int(size) if isinstance(size, (int, float)) else None)


def uri_to_path(uri: str, remap: Mapping[str, str] | None = None) -> Path:
    """A log entry's ``path`` (a URL-encoded URI, ``SparkPath.urlEncoded``) → a local, resolved path.

    ``file:///x/a%20b``, ``file:/x/a%20b`` and ``/x/a%20b`` all give ``/x/a b``; escapes are decoded
    exactly once (a Hive-escaped directory ``k=a%3Ab`` is stored as ``k=a%253Ab``). Then the longest
    matching ``remap`` prefix is replaced (whole path components only).

    Raises: :class:`FileSinkLogError` for a non-local scheme (``hdfs://``, ``s3a://``, ...).
    """
    u = urlsplit(uri)
    if u.scheme not in ("", "file") or u.netloc not in ("", "localhost"):
        raise FileSinkLogError(f"the log lists {uri!r}, which is not a local file: only output directories on a "
                               f"local (or mounted) filesystem can be read; copy the output and pass remap")
    p = os.path.normpath(unquote(u.path))
    for src in sorted(remap or {}, key=len, reverse=True):
        s = os.path.normpath(src)
        if p == s or p.startswith(s.rstrip("/") + "/"):
            p = os.path.normpath(remap[src]) + p[len(s):]
            break
    return Path(os.path.realpath(p))


# ---------------------------------------------------------------------------------------- file sets


def committed_files(path: str | os.PathLike, **opts) -> list[Path]:
    """The data files the log commits, resolved, in commit order (batch, then entry order), whether or
    not they are still on disk. ``opts``: those of :func:`read_log`. Raises as :func:`read_log`."""
    return list(read_log(path, **opts).files)


def _is_hidden(name: str, is_dir: bool) -> bool:
    """Names Spark's listing skips (``HadoopFSUtils.shouldFilterOutPathName``: ``_x`` unless a partition
    ``k=v`` directory, ``.x``, ``x._COPYING_``), plus ``.crc`` checksums. Unlike Spark, ``_metadata`` /
    ``_common_metadata`` (parquet summaries, never JSON data) are skipped too."""
    if name.startswith("."):
        return True
    if name.startswith("_"):
        return not (is_dir and "=" in name)
    return name.endswith("._COPYING_") or name.endswith(".crc")


def all_data_files(path: str | os.PathLike) -> list[Path]:
    """Every data file under ``path`` (recursing into partition directories), resolved and sorted:
    ``_spark_metadata``, hidden (``.``), underscore (``_SUCCESS``) and ``.crc`` names are not data. The
    uncommitted view. Raises ``FileNotFoundError`` when ``path`` does not exist."""
    root = os.path.realpath(path)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: no such output directory")
    found = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not _is_hidden(x, True)]
        found += [Path(d) / n for n in names if not _is_hidden(n, False) and os.path.isfile(os.path.join(d, n))]
    return sorted(found)


def orphan_files(path: str | os.PathLike, **opts) -> list[Path]:
    """Data files in the directory that the log does not list (sorted): written, never committed.
    ``opts``: those of :func:`read_log`. Raises as :func:`read_log`."""
    committed = read_log(path, **opts).files
    return [f for f in all_data_files(path) if f not in committed]


# ------------------------------------------------------------------------------------------- records


def read_records(files: Sequence[str | os.PathLike], problems: list[str] | None = None, *,
                 partitions: Sequence[int] | None = None, ranks: Sequence[int] | None = None) -> pd.DataFrame:
    """The JSON lines of ``files`` as one frame, in file then line order, for the exactly-once checker.

    Columns: ``partition`` int32 (the file's index in ``files``, or ``partitions[i]`` when given) and
    ``offset`` int64 (= ``line``): they play Kafka's (partition, offset), so a key's records are in
    output order when ``files`` is in commit order (:func:`committed_files`; sorting by name would not
    do: names are ``part-<split>-<random uuid>``); ``file`` (the file's name), ``line`` (0-based line
    number in the file); ``key`` (str, NA when absent), ``seq`` (Int64, NA when the line is not a JSON
    object with an integer ``seq``, e.g. a torn last line); every other JSON field as a column (a field
    named like one of ``partition``/``offset``/``file``/``line`` is kept as ``json_<name>``); and, when
    ``in_partition`` and ``in_offset`` are fields, ``op.input`` = ``"<in_partition>:<in_offset>"`` (str,
    NA when either is missing), which the checker pairs copies with their input record by. Blank lines
    are skipped (Spark's JSON reader skips them; line numbers still count them). ``.gz`` files are
    decompressed (a truncated one as far as it goes).

    ``ranks`` (one per file, negative = none): the order a user can read of each file's records, as an
    :data:`~onceproof.sinks.base.ORDER_RANK` column (the batch whose log entry committed the file: the
    files of one batch, and the lines in them, have no order a reader of the directory sees).

    A file that does not exist is skipped, with a sentence in ``problems`` (else a logged warning): the
    log may list files deleted since. Raises: :class:`FileSinkLogError` for a compression other than
    gzip (``.bz2``, ``.lz4``, ``.snappy``, ``.deflate``, ``.zst``).
    """
    for name, per_file in (("partitions", partitions), ("ranks", ranks)):
        if per_file is not None and len(per_file) != len(files):
            raise ValueError(f"{name} has {len(per_file)} items for {len(files)} files")
    rank_l: list[np.ndarray] = []
    vals: list[bytes] = []
    part_l: list[np.ndarray] = []
    line_l: list[np.ndarray] = []
    name_l: list[np.ndarray] = []
    for i, f in enumerate(files):
        f = Path(f)
        if f.name.endswith(_UNREADABLE):
            raise FileSinkLogError(f"{f} is compressed with a codec this reader does not decode: write the "
                                   f"output uncompressed or with option('compression', 'gzip')")
        try:
            data = _read_bytes(f)
        except FileNotFoundError:
            msg = f"{f}: listed but not on disk; skipped"
            if problems is None:
                log.warning("%s", msg)
            else:
                problems.append(msg)
            continue
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        idx = np.array([j for j, ln in enumerate(lines) if ln.strip()], dtype=np.int64)
        if not len(idx):
            continue
        vals += [lines[j] for j in idx]
        line_l.append(idx)
        part_l.append(np.full(len(idx), i if partitions is None else partitions[i], dtype=np.int32))
        name_l.append(np.full(len(idx), f.name, dtype=object))
        if ranks is not None:
            rank_l.append(np.full(len(idx), ranks[i], dtype=np.int64))
    n = len(vals)
    lines_a = np.concatenate(line_l) if line_l else np.empty(0, np.int64)
    base = pd.DataFrame({"partition": np.concatenate(part_l) if part_l else np.empty(0, np.int32),
                         "offset": lines_a,
                         "file": np.concatenate(name_l) if name_l else np.empty(0, object),
                         "line": lines_a.copy(),
                         "key": pd.array([pd.NA] * n, dtype="string"),
                         "value": np.array(vals, dtype=object) if n else np.empty(0, object)})
    out = decode_values(base.rename(columns={c: f"\0{c}" for c in _OWN}))
    out = out.rename(columns={c: f"json_{c}" for c in _OWN if c in out.columns})
    out = out.rename(columns={f"\0{c}": c for c in _OWN})
    out["key"] = out["key"].astype("string")
    if "in_partition" in out.columns and "in_offset" in out.columns:
        ip = pd.to_numeric(out["in_partition"], errors="coerce").astype("Int64")
        io = pd.to_numeric(out["in_offset"], errors="coerce").astype("Int64")
        ref = ip.astype("string") + ":" + io.astype("string")  # NA where either is NA
        out[INPUT_REF] = ref.astype(object).where(ref.notna(), None)
    if ranks is not None:
        out[ORDER_RANK] = table_rows.rank_column(np.concatenate(rank_l) if rank_l else np.empty(0, np.int64))
    return out


def _read_bytes(f: Path) -> bytes:
    data = f.read_bytes()
    if f.name.endswith(".gz"):
        d = zlib.decompressobj(wbits=47)  # gzip header; a truncated (killed) file gives what it holds
        try:
            data = d.decompress(data)
        except zlib.error:
            data = b""
    return data


# --------------------------------------------------------------------------------------------- views


def _views(path, opts) -> tuple[SinkLog, list[Path], list[Path], set[Path]]:
    sl = read_log(path, **opts)
    listed = all_data_files(path)
    on_disk = set(listed)
    orphans = [f for f in listed if f not in sl.files]
    return sl, list(sl.files), orphans, on_disk


def committed_view(path: str | os.PathLike, problems: list[str] | None = None, **opts) -> pd.DataFrame:
    """The committed view as checker output rows (:func:`read_records` columns): the files the log lists,
    in commit order, ``partition`` = the file's index in commit order, ranked by the batch that committed
    each (the per-key order is judged across batches only). Committed files missing from
    disk are skipped (:func:`stats` counts them). ``opts``: those of :func:`read_log`."""
    sl, committed, _, on_disk = _views(path, opts)
    keep = [i for i, f in enumerate(committed) if f in on_disk or f.exists()]
    return read_records([committed[i] for i in keep], problems, partitions=keep,
                        ranks=[sl.files[committed[i]].batch for i in keep])


def listing_view(path: str | os.PathLike, problems: list[str] | None = None, **opts) -> pd.DataFrame:
    """The uncommitted view: every data file in the directory (:func:`all_data_files`), committed or
    not. ``partition`` numbers files as in :func:`committed_view` (commit order), then the orphans
    after them in name order, so a committed file has the same ``partition`` in both views; ranks as in
    :func:`committed_view`, none for an orphan.
    ``opts``: those of :func:`read_log`."""
    sl, committed, orphans, on_disk = _views(path, opts)
    order = committed + orphans
    keep = [i for i, f in enumerate(order) if f in on_disk]
    return read_records([order[i] for i in keep], problems, partitions=keep,
                        ranks=[sl.files[order[i]].batch if order[i] in sl.files else -1 for i in keep])


def stats(path: str | os.PathLike, **opts) -> dict:
    """Counts for the report: ``committed_files`` (files the log lists), ``data_files`` (files in the
    directory), ``orphan_files`` (in the directory, not listed), ``missing_files`` (listed, not on
    disk), ``size_mismatch_files`` (listed, on disk with another size than logged: truncated or
    rewritten after the commit), ``committed_records`` / ``listed_records`` (non-blank lines in the
    committed / listing view), ``last_batch`` (highest batch id in the log, ``None`` when empty),
    ``log_files`` (names read, newest compact first), ``deleted_entries`` ("delete" actions met),
    ``torn_log`` (a skipped torn last log file, or ``None``) and ``problems`` (sentences).
    ``opts``: those of :func:`read_log`. Raises as :func:`read_log`."""
    sl, committed, orphans, on_disk = _views(path, opts)
    problems = list(sl.problems)
    missing = [f for f in committed if f not in on_disk and not f.exists()]
    if missing:
        outside = [f for f in missing if not f.is_relative_to(sl.directory)]
        if outside:
            guess = _spark_dir(outside[0])
            problems.append(
                f"{len(outside)} logged file(s) are outside {sl.directory} (first: {outside[0]}): Spark saw the "
                f"output directory under another path (a container mount?); pass remap={{{str(guess)!r}: "
                f"{str(sl.directory)!r}}}")
    mismatch = [f for f in committed if f in on_disk and sl.files[f].size is not None
                and f.stat().st_size != sl.files[f].size]
    return {
        "committed_files": len(committed),
        "data_files": len(on_disk),
        "orphan_files": len(orphans),
        "missing_files": len(missing),
        "size_mismatch_files": len(mismatch),
        "committed_records": _count_records(f for f in committed if f in on_disk or f.exists()),
        "listed_records": _count_records(sorted(on_disk)),
        "last_batch": sl.last_batch,
        "log_files": list(sl.log_files),
        "deleted_entries": sl.deleted,
        "torn_log": sl.torn_log,
        "problems": problems,
    }


def _count_records(files: Iterable[Path]) -> int:
    n = 0
    for f in files:
        try:
            data = _read_bytes(f)
        except FileNotFoundError:
            continue
        n += sum(1 for ln in data.split(b"\n") if ln.strip())
    return n


def _top_level_data_files(path: str | os.PathLike) -> int:
    """Data files directly in ``path`` (names as :func:`all_data_files` takes them); 0 when it does not
    exist."""
    try:
        with os.scandir(path) as it:
            return sum(1 for d in it if not _is_hidden(d.name, False) and d.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return 0


def _spark_dir(p: Path) -> Path:
    """The output directory Spark most likely used for the logged file ``p``: its parent, less any
    trailing ``k=v`` partition directories."""
    d = p.parent
    while "=" in d.name and d.parent != d:
        d = d.parent
    return d


# ------------------------------------------------------------------------------------- the sink's reader

LISTING = "listing"
"""The file sink's second read (``--file-read listing``): every data file, as a careless downstream job
reads the directory (a mutant reader)."""
SUMMARY_KEYS = ("committed_files", "data_files", "orphan_files", "missing_files", "committed_records",
                "listed_records", "last_batch")
"""The :func:`stats` kept in ``result["file_sink"]`` and (prefixed ``file_sink_``, but ``orphan_files``)
in ``result["stats"]``."""


def read_output(location: OutputLocation) -> OutputView:
    """The file sink's :class:`~onceproof.sinks.base.OutputReader`: ``location.directory`` as checker
    frames. ``committed`` is the committed view (the files ``_spark_metadata`` lists: the sink's
    read_committed) or, with ``location.read == "listing"``, every data file in the directory;
    ``uncommitted`` is every data file; ``stats``/``summary`` are :data:`SUMMARY_KEYS` of :func:`stats`
    (``orphan_files`` is a statistic, not an anomaly); a torn log file makes the output ``unsettled``.

    Raises: :class:`~onceproof.sinks.base.OutputError` for an unknown read, or naming the directory when
    it is not a Spark file-sink output or its log is damaged."""
    path, read = location.directory, location.read
    if read not in (COMMITTED, LISTING):
        raise OutputError(f"unknown file reader {read!r}: use {COMMITTED} or {LISTING}")
    if os.path.isdir(path) and not has_log(path):
        return _unlogged_output(path)
    problems: list[str] = []
    try:
        listing = listing_view(path, problems)
        view = listing if read == LISTING else committed_view(path, problems)
        st = stats(path)
    except (OSError, FileSinkLogError) as e:
        raise OutputError(f"{path}: {e}") from e
    problems += list(st.get("problems") or [])
    return OutputView(committed=view, uncommitted=listing, problems=problems,
                      unsettled=[f"file sink: {p}" for p in problems if "torn" in p],
                      stats=_run_stats(st),
                      summary={"read": read, **{k: st.get(k) for k in SUMMARY_KEYS}}, result_key="file_sink")


def _run_stats(st: dict) -> dict:
    """:data:`SUMMARY_KEYS` of :func:`stats` as ``result["stats"]`` keys: ``file_sink_<key>``, but
    ``orphan_files``."""
    return {f"file_sink_{k}" if k != "orphan_files" else k: st.get(k) for k in SUMMARY_KEYS}


def has_log(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a ``_spark_metadata`` directory, the test Spark's batch reader makes
    (``FileStreamSink.hasMetadata``) before choosing the log over a listing."""
    return (Path(path) / METADATA_DIR).is_dir()


def _unlogged_output(path: str | os.PathLike) -> OutputView:
    """A directory with no ``_spark_metadata`` (a job that writes files with ``df.write`` from
    ``foreachBatch``): read as Spark's batch reader reads it, every data file, since with no log
    ``DataSource.resolveRelation`` lists the directory (``InMemoryFileIndex``) instead of using
    ``MetadataLogFileIndex``. Committed and uncommitted views are the same frame: nothing tells them
    apart, and nothing orders the files (no order rank: the per-key order is not judged). Raises
    :class:`~onceproof.sinks.base.OutputError` when the directory cannot be read."""
    problems: list[str] = []
    try:
        files = all_data_files(path)
        view = read_records(files, problems, ranks=[-1] * len(files))  # a listing has no order
    except (OSError, FileSinkLogError) as e:
        raise OutputError(f"{path}: {e}") from e
    note = (f"{path} has no {METADATA_DIR} log (not Spark's file sink): read as Spark's batch reader reads "
            f"it, every data file")
    st = {"committed_files": len(files), "data_files": len(files), "orphan_files": 0, "missing_files": 0,
          "committed_records": len(view), "listed_records": len(view), "last_batch": None}
    return OutputView(committed=view, uncommitted=view, problems=[note, *problems], unsettled=[],
                      stats=_run_stats(st),
                      summary={"read": "listing (no log)", **st}, result_key="file_sink")


class MetadataLogEnds:
    """A file sink's committed output as a :class:`~onceproof.sinks.base.CommittedEnd`, from
    ``location.directory``: ``{0: batches in _spark_metadata}`` (the highest ``N`` or ``N.compact``
    there, plus one; 0 for none). It grows when the driver commits batch N to the sink's log, just before
    Spark's ``commits/N`` (``pipeline/file_sink.py``). A directory with no log (a job writing with
    ``df.write``; Spark's file sink makes the log when its query starts) is read as :func:`read_output`
    reads it, every data file: ``{0: data files at its top level}``, which grows when a write job
    commits (its tasks write under ``_temporary``, which is not data). One directory listing, so polled
    every 5 ms."""

    poll_s = 0.005

    def __init__(self, location: OutputLocation):
        self.path = location.directory

    def read(self) -> dict[int, int]:
        last = latest_batch(self.path)
        if last is None and not has_log(self.path):
            return {0: _top_level_data_files(self.path)}
        return {0: 0 if last is None else last + 1}

    def close(self) -> None:
        """Nothing to release."""
