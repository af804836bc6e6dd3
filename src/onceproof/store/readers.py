"""One reader per run file (names and layout: :mod:`onceproof.store.runfiles`).

Every reader takes the run directory. An absent file is not an error: JSON objects and snapshots read as
``None``, JSON-lines files as no rows. A file that exists but cannot be parsed raises
:class:`DamagedFile`, whose message starts with the file's path; callers decide whether that ends a
check (``checking/checks.py``) or is listed in the report (``report/load.py``).

JSON-lines files are appended while the run goes, by one writer (``history.jsonl``, ``nemesis.jsonl``:
``store/history.py``) or by many processes at once (``sink.jsonl``: every sink task and the driver,
``pipeline/transactional_sink.py``), so a line can be torn by a crash:

* a history's torn **last** line is dropped; a bad line before it means the file was edited or
  corrupted and raises;
* ``sink.jsonl``'s torn lines are dropped **wherever** they are (a killed task's partial line can be
  followed by other processes' lines), and a reader polling it during the run sees the line being
  written as torn.

A dropped line is described in ``problems`` when the caller passes a list, else logged as a warning.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from onceproof.store.columns import Chunks, release_freed_memory
from onceproof.store.compact import read_text
from onceproof.store.runfiles import GZ, RunFiles, stored

log = logging.getLogger("onceproof.store")
T = TypeVar("T")


class DamagedFile(ValueError):
    """A run file exists but cannot be parsed. The message starts with the file's path."""


# ------------------------------------------------------------------------------------------ JSON objects


def read_or_none(reader: Callable[[Path], T], run_dir: Path) -> T | None:
    """``reader(run_dir)``, or ``None`` when the file cannot be read (damaged, or an ``OSError``): for
    listings that show what they can and move on (the index, ``junit.xml``)."""
    try:
        return reader(run_dir)
    except (OSError, DamagedFile):
        return None



def read_test(run_dir: Path) -> dict | None:
    """``test.json``: config, seed, versions, schedule, replay command (``docs/results-schema.md``).

    Raises: :class:`DamagedFile` when it is not a JSON object.
    """
    return _json_object(RunFiles(run_dir).test)


def read_results(run_dir: Path) -> dict | None:
    """``results.json``: the verdict, counts, examples, faults, timings (``docs/results-schema.md``).

    Raises: :class:`DamagedFile` when it is not a JSON object.
    """
    return _json_object(RunFiles(run_dir).results)


def read_recovery(run_dir: Path) -> dict | None:
    """``recovery.json``: ``finished``, ``reasons``, ``seconds`` and per-partition offsets (``input_end``,
    ``consumed``, ``output_lso``, ``output_hw``: ``{partition as str: offset}``).

    Raises: :class:`DamagedFile` when it is not a JSON object.
    """
    return _json_object(RunFiles(run_dir).recovery)


def _json_object(path: Path) -> dict | None:
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise DamagedFile(f"{path} is not readable JSON ({e})") from e
    if not isinstance(obj, dict):
        raise DamagedFile(f"{path} is not a JSON object")
    return obj


# ------------------------------------------------------------------------------------------- JSON lines


def read_history(run_dir: Path, problems: list[str] | None = None, columns: tuple[str, ...] | None = None,
                 keep: Callable[[pd.DataFrame], pd.DataFrame] | None = None, narrow_ints: bool = False
                 ) -> pd.DataFrame:
    """``history.jsonl``: one row per workload op (``index``, ``time`` ns since start, ``wall`` epoch s,
    ``process``, ``type``, ``f``, ``key``, ``seq``, ...); an empty frame when absent. Only ``columns``
    when given (those the file has, in file order), and only the rows ``keep`` (frame → frame, called
    once per block of lines, in file order) keeps of each block.

    Read :data:`JSON_BLOCK` bytes at a time into compact columns (:func:`json_lines_frame`): a long
    run's history (two lines per record sent) never exists as one dict per op. String columns are
    ``category`` (few distinct values) or ``string[pyarrow]``, floats as float32 when that is exact,
    and with ``narrow_ints`` ints as int32 when they fit; values are those ``json.loads`` gives.

    Raises: :class:`DamagedFile` naming ``file:line`` for a bad line before the last.
    """
    return json_lines_frame(RunFiles(run_dir).history, problems, columns, keep, narrow_ints)


def read_nemesis(run_dir: Path, problems: list[str] | None = None) -> pd.DataFrame:
    """``nemesis.jsonl``: one row per fault or heal op (``type``, ``f``, ``wall``, ``time``, ``outcome``,
    ``target``, ``evidence``, ...; same clock as the history); an empty frame when absent.

    Raises: :class:`DamagedFile` naming ``file:line`` for a bad line before the last.
    """
    return pd.DataFrame.from_records(_json_lines(RunFiles(run_dir).nemesis, problems, torn_anywhere=False))


def read_sink(run_dir: Path, problems: list[str] | None = None) -> list[dict]:
    """``sink.jsonl``: the eos sink's events in file order, each a dict with at least ``time`` (epoch s)
    and ``event`` (``pipeline/transactional_sink.py`` lists them); ``[]`` when absent (e.g. the
    at-least-once sink). Torn lines are dropped wherever they are. Never raises for bad lines."""
    return _json_lines(RunFiles(run_dir).sink, problems, torn_anywhere=True)


def _json_lines(path: Path, problems: list[str] | None, *, torn_anywhere: bool) -> list[dict]:
    path = stored(path)  # history.jsonl.gz once the run is compacted
    try:
        lines = read_text(path).splitlines()
    except FileNotFoundError:
        return []
    except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt .gz
        raise DamagedFile(f"{path} cannot be decompressed ({e})") from e
    return _parse_lines(lines, path, problems, torn_anywhere=torn_anywhere)


def _parse_lines(lines: list[str], path: Path, problems: list[str] | None, *, torn_anywhere: bool,
                 first: int = 0, ends_file: bool = True) -> list[dict]:
    """``lines`` (lines ``first + 1``, ... of ``path``; the file's last line among them when
    ``ends_file``) as dicts, one per JSON object line; blank lines skipped; a line that is not a JSON
    object is dropped and described in ``problems`` when it is the file's last line or
    ``torn_anywhere``, else raises :class:`DamagedFile` naming ``file:line``."""
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            rows.append(obj)
            continue
        last = ends_file and i == len(lines) - 1
        if not (last or torn_anywhere):
            raise DamagedFile(f"{path}:{first + i + 1} is not a JSON object; the file is corrupt")
        msg = f"{path}: dropped a torn {'last ' if last else ''}line ({first + i + 1})"
        if problems is None:
            log.warning("%s", msg)
        else:
            problems.append(msg)
    return rows


JSON_BLOCK = 32 << 20
"""Bytes of a JSON-lines file :func:`json_lines_frame` parses at a time (~300,000 history ops)."""

# bytes str.splitlines() ends a line at besides "\n": a block holding one is split the exact way, line by
# line (in UTF-8 the non-ASCII ones, U+0085, U+2028 and U+2029, start with \xc2 or \xe2)
_OTHER_LINE_ENDS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_NON_ASCII_LINE_ENDS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
_FLAT = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_boolean, pa.types.is_null)


def json_lines_frame(path: Path, problems: list[str] | None = None, columns: tuple[str, ...] | None = None,
                     keep: Callable[[pd.DataFrame], pd.DataFrame] | None = None, narrow_ints: bool = False
                     ) -> pd.DataFrame:
    """A JSON-lines file (or its ``.gz``) as a frame, one row per line, with the semantics of
    :func:`_parse_lines` (``json.loads`` per line, a torn last line dropped, a bad line before it
    raising :class:`DamagedFile`) but read :data:`JSON_BLOCK` bytes at a time: each block is parsed by
    pyarrow's JSON reader when that gives what ``json.loads`` would (one flat object per line: ints
    within int64, floats, strings, bools, nulls; otherwise, and for the file's last line, the block
    goes line by line), kept to ``columns`` and passed through ``keep`` when given, and turned into
    compact columns (``onceproof.store.columns.Chunks``, ``narrow_ints`` passed on) before the next is read.
    Column order: first appearance. An empty frame when the file is absent.

    Raises: :class:`DamagedFile` for a bad line before the last, or a ``.gz`` that cannot be
    decompressed."""
    path = stored(path)
    chunks = Chunks(narrow_ints=narrow_ints)
    line0 = 0
    try:
        with (gzip.open(path, "rb") if path.name.endswith(GZ) else open(path, "rb")) as f:
            for block, ends_file in _line_blocks(f):
                frame, n = _block_frame(block, path, problems, line0, ends_file, columns)
                line0 += n
                chunks.add(keep(frame) if keep is not None else frame)
                del frame
                release_freed_memory()  # the block's parse, before the next block is read
    except FileNotFoundError:
        return pd.DataFrame()
    except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt .gz
        raise DamagedFile(f"{path} cannot be decompressed ({e})") from e
    if not len(chunks):
        return pd.DataFrame()
    out = chunks.frame()
    release_freed_memory()
    return out


def _line_blocks(f):
    """``(block, ends_file)`` pieces of the binary file ``f``, each ending at a ``\\n`` except perhaps
    the last, about :data:`JSON_BLOCK` bytes each (a read of that many bytes completed to its line's
    end by ``readline``: one copy of the block, not two); ``ends_file`` on the piece holding the last
    line."""
    pending = None
    while True:
        data = f.read(JSON_BLOCK)
        if data and not data.endswith(b"\n"):
            data += f.readline()
        if not data:
            if pending is not None:
                yield pending, True
            return
        if pending is not None:
            yield pending, False
        pending = data


def _block_frame(block: bytes, path: Path, problems: list[str] | None, first: int, ends_file: bool,
                 columns: tuple[str, ...] | None) -> tuple[pd.DataFrame, int]:
    """One block of lines (lines ``first + 1``, ...) → (frame of ``columns``, lines in it, as
    ``str.splitlines`` counts them)."""
    if _odd_line_ends(block):
        return _slow_block(block, path, problems, first, ends_file, columns)
    tail = b""
    if ends_file:  # the last line may be torn: it goes the line-by-line way on its own
        body = block[:-1] if block.endswith(b"\n") else block
        cut = body.rfind(b"\n")
        block, tail = block[:cut + 1], block[cut + 1:]
    n = block.count(b"\n")
    frame = _arrow_lines(block, n, columns) if n else pd.DataFrame()
    if frame is None:
        frame, n = _slow_block(block, path, problems, first, False, columns)
    if tail:
        last, m = _slow_block(tail, path, problems, first + n, True, columns)
        frame = pd.concat([frame, last], ignore_index=True) if len(frame) else last
        n += m
    return frame, n


def _odd_line_ends(block: bytes) -> bool:
    """Whether ``block`` holds a byte sequence ``str.splitlines`` ends a line at, besides ``\\n``.

    One ``in`` per single byte (a ``memchr`` each), and the UTF-8 ones only in a block that is not
    ASCII (``json.dumps`` writes ASCII unless told not to): a regular expression over the block took
    longer than pyarrow's parse of it (2.3 s and 1.1 s of a 2M-record history's 6.2 s read)."""
    if any(b in block for b in _OTHER_LINE_ENDS):
        return True
    return not block.isascii() and any(e in block for e in _NON_ASCII_LINE_ENDS)


def _arrow_lines(block: bytes, n: int, columns: tuple[str, ...] | None) -> pd.DataFrame | None:
    """``n`` lines, each ending in ``\\n``, parsed by pyarrow (string columns dictionary-encoded, so
    they arrive as ``category`` without a Python str per row); None when that could differ from
    ``json.loads`` per line: a parse error, a blank line or two objects on one line (row count), a
    nested value or a string pyarrow read as a timestamp (type), or an integer beyond int64 (pyarrow
    makes its column double: a double of magnitude >= 2**63)."""
    try:
        t = pj.read_json(io.BytesIO(block), parse_options=pj.ParseOptions(unexpected_field_behavior="infer"))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if t.num_rows != n or not all(any(ok(f.type) for ok in _FLAT) for f in t.schema):
        return None
    for f in t.schema:
        big = pc.max(pc.abs(t[f.name])).as_py() if pa.types.is_floating(f.type) else None
        if big is not None and big >= 2.0 ** 63:
            return None
    if columns is not None:
        t = t.select([c for c in t.column_names if c in columns])
    t = pa.table([pc.dictionary_encode(c) if pa.types.is_string(c.type) else c for c in t.columns],
                 names=t.column_names)
    return t.to_pandas()


def _slow_block(block: bytes, path: Path, problems: list[str] | None, first: int, ends_file: bool,
                columns: tuple[str, ...] | None) -> tuple[pd.DataFrame, int]:
    lines = block.decode("utf-8", "replace").splitlines()
    rows = _parse_lines(lines, path, problems, torn_anywhere=False, first=first, ends_file=ends_file)
    frame = pd.DataFrame.from_records(rows)
    if columns is not None:
        frame = frame[[c for c in frame.columns if c in columns]]
    return frame, len(lines)


# -------------------------------------------------------------------------------------- topic snapshots


def read_input(run_dir: Path) -> pd.DataFrame | None:
    """``input.parquet``: the input topic at read_committed as checked (``partition``, ``offset``,
    ``key``, ``seq``, ``timestamp`` epoch ms when recorded).

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).input)


def read_output(run_dir: Path) -> pd.DataFrame | None:
    """``output.parquet``: the output topic at read_committed as checked (the input's columns plus
    ``in_partition``, ``in_offset``, ``in_ts`` epoch ms and the ``op.*`` provenance headers).

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).output)


def read_output_uncommitted(run_dir: Path) -> pd.DataFrame | None:
    """``output_uncommitted.parquet``: the output topic at read_uncommitted: ``partition``, ``offset``
    (runs before issue 11: the output's columns).

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).output_uncommitted)


def read_live(run_dir: Path) -> pd.DataFrame | None:
    """``live.parquet``: what the during-faults read_committed reader saw (``partition``, ``offset``,
    ``key``, ``seq``, ``in_ts`` and ``seen_ms``, epoch ms).

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).live)


DRIVER_APPS = "driver.apps.jsonl"  # in control/: one line per driver query start (pipeline/hooks.py APPS)


def read_driver_starts(run_dir: Path) -> list[float] | None:
    """Epoch s at which each driver incarnation's query started (``control/driver.apps.jsonl``, written by
    the bundled job's ``ControlDir.mark_ready``), ``None`` when the pipeline wrote none (a ``--pipeline-cmd``
    job). Torn lines are skipped; never raises for bad lines."""
    rows = _json_lines(RunFiles(run_dir).control / DRIVER_APPS, [], torn_anywhere=True)
    starts = [float(r["time"]) for r in rows if isinstance(r.get("time"), (int, float))]
    return starts or None


def read_lso(run_dir: Path) -> pd.DataFrame | None:
    """``lso.parquet``: the output's LSO and high watermark sampled through the run (``t_ms`` epoch ms,
    ``partition``, ``lso``, ``hw``; ``clients/lso_sampler.py``); ``None`` for a run stored without it.

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).lso)


def _parquet(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types; all mean a damaged file
        raise DamagedFile(f"{path} is not a readable parquet file ({type(e).__name__}: {e})") from e
