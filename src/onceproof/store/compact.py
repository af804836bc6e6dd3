"""Shrink a finished run directory: gzip its large text files once nothing writes them any more.

A run's bulk is text that compresses 8–15×: ``history.jsonl`` (one JSON line per workload op: 4.5 MB for a
60 s run at 300 records/s, 30 MB for a 120 s ``--nemesis all`` run), and the broker, toxiproxy, driver and
executor logs (9 MB in the latter). :func:`compact` replaces each with ``<name>.gz`` after the run ended,
so a finished run keeps every byte of evidence at a fraction of the disk (issue 7 item 18: "a 60 s run
should take a few MB"). The history stays plain **while** the run goes (appended and flushed op by op,
so a crashed run can still be checked); the runner compacts only a run that reached a verdict.

Readers find either form: :func:`onceproof.store.runfiles.stored` names the file as stored, :func:`read_text`
reads it. Python's ``gzip`` module (standard library) writes the files; ``zless``/``zcat``/``zgrep``
read them by hand.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from onceproof.store.runfiles import GZ, RunFiles, stored

MIN_LOG_BYTES = 64 * 1024
"""Logs smaller than this (bytes) stay plain: nothing to gain, and the small ones are the first read."""

KEEP_PLAIN = ("harness.log",)
"""Logs still open while the run finishes (the harness logs until the process exits)."""


def gzip_file(path: Path) -> Path:
    """Replace ``path`` by ``path.gz`` (level 6) and return the new path. The ``.gz`` is written under a
    temporary name and renamed, then ``path`` removed, so a crash leaves one complete copy at least.

    Raises: ``OSError`` when either file cannot be written or removed.
    """
    out = path.with_name(path.name + GZ)
    tmp = path.with_name(path.name + GZ + ".tmp")
    with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, out)
    path.unlink()
    return out


def compact(run_dir: Path, min_log_bytes: int = MIN_LOG_BYTES) -> list[tuple[str, int, int]]:
    """Gzip ``history.jsonl`` and every log under ``logs/`` of at least ``min_log_bytes`` bytes (except
    :data:`KEEP_PLAIN`) of a run that has ended; files already compressed are skipped.

    Returns: ``(path relative to run_dir, bytes before, bytes after)`` per file compressed.
    Raises: ``OSError`` (see :func:`gzip_file`); files compressed before the error stay compressed.
    """
    files = RunFiles(run_dir)
    todo = [files.history] if files.history.is_file() else []
    if files.logs.is_dir():
        todo += sorted(p for p in files.logs.rglob("*") if p.is_file() and not p.is_symlink()
                       and not p.name.endswith((GZ, GZ + ".tmp")) and p.name not in KEEP_PLAIN
                       and p.stat().st_size >= min_log_bytes)
    done = []
    for p in todo:
        before = p.stat().st_size
        out = gzip_file(p)
        done.append((str(out.relative_to(files.path)), before, out.stat().st_size))
    return done


def read_text(path: Path, errors: str = "replace") -> str:
    """The text of ``path`` as stored: ``path`` itself or, after :func:`compact`, ``path.gz``.

    Raises: ``FileNotFoundError`` when neither exists.
    """
    p = stored(Path(path))
    if p.name.endswith(GZ):
        with gzip.open(p, "rt", encoding="utf-8", errors=errors) as f:
            return f.read()
    return p.read_text(encoding="utf-8", errors=errors)
