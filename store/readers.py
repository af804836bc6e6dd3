"""One reader per run file (names and layout: :mod:`store.runfiles`).

Every reader takes the run directory. An absent file is not an error: JSON objects and snapshots read as
``None``, JSON-lines files as no rows. A file that exists but cannot be parsed raises
:class:`DamagedFile`, whose message starts with the file's path; callers decide whether that ends a
check (``harness/checking.py``) or is listed in the report (``report/load.py``).

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

import json
import logging
import zlib
from pathlib import Path
from typing import Callable, TypeVar

import pandas as pd

from store.compact import read_text
from store.runfiles import RunFiles, stored

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


def read_history(run_dir: Path, problems: list[str] | None = None) -> pd.DataFrame:
    """``history.jsonl``: one row per workload op (``index``, ``time`` ns since start, ``wall`` epoch s,
    ``process``, ``type``, ``f``, ``key``, ``seq``, ...); an empty frame when absent.

    Raises: :class:`DamagedFile` naming ``file:line`` for a bad line before the last.
    """
    return pd.DataFrame.from_records(_json_lines(RunFiles(run_dir).history, problems, torn_anywhere=False))


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
        last = i == len(lines) - 1
        if not (last or torn_anywhere):
            raise DamagedFile(f"{path}:{i + 1} is not a JSON object; the file is corrupt")
        msg = f"{path}: dropped a torn {'last ' if last else ''}line ({i + 1})"
        if problems is None:
            log.warning("%s", msg)
        else:
            problems.append(msg)
    return rows


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
    """``output_uncommitted.parquet``: the output topic at read_uncommitted (same columns as the output).

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).output_uncommitted)


def read_live(run_dir: Path) -> pd.DataFrame | None:
    """``live.parquet``: what the during-faults read_committed reader saw (``partition``, ``offset``,
    ``key``, ``seq``, ``in_ts`` and ``seen_ms``, epoch ms).

    Raises: :class:`DamagedFile` when unreadable.
    """
    return _parquet(RunFiles(run_dir).live)


def _parquet(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types; all mean a damaged file
        raise DamagedFile(f"{path} is not a readable parquet file ({type(e).__name__}: {e})") from e
