"""The result store: ``results/<test>/<YYYYmmddTHHMMSS>/`` per run, ``results/latest`` → newest.

Files in a run directory (DESIGN §5): ``test.json`` (config, seed, versions), ``history.jsonl``,
``nemesis.jsonl``, ``sink.jsonl``, ``results.json``, ``input.parquet`` / ``output.parquet`` (the topics as
read for the check, so ``onceproof check RUN_DIR`` can re-check offline), ``logs/`` (brokers, drivers and
executors), ``control/`` and ``checkpoint/`` (the pipeline's own state).

This module owns the naming of run directories: creating them (:class:`RunDir`), recognising them
(:func:`is_run_dir`, :func:`runs_of`) and deleting old ones (:func:`prune`), keeping the ``latest`` links
right.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

DEFAULT_ROOT = Path(os.environ.get("ONCEPROOF_RESULTS", "results"))

# Files of which at least one is in every run directory (a run that crashed at once has test.json).
RUN_MARKERS = ("test.json", "results.json", "history.jsonl", "input.parquet", "output.parquet")
# A run without results.json whose files changed this recently (seconds) may still be running.
ACTIVE_S = 3600.0
_STAMP = re.compile(r"^(\d{8}T\d{6})(?:-(\d+))?$")


class RunDir:
    """One run's directory. Creating it also repoints ``<root>/latest`` and ``<root>/<test>/latest``."""

    def __init__(self, root: Path, test: str, stamp: str | None = None):
        stamp = stamp or time.strftime("%Y%m%dT%H%M%S")
        self.path = (root / test / stamp).resolve()
        n = 1
        while self.path.exists():  # two runs in the same second
            self.path = (root / test / f"{stamp}-{n}").resolve()
            n += 1
        for sub in ("logs", "control"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        _symlink(root / "latest", self.path.relative_to(root.resolve()))
        _symlink(root / test / "latest", Path(self.path.name))

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, obj) -> Path:
        """Write ``obj`` as indented JSON atomically (tmp + rename)."""
        p = self.path / name
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, default=str))
        os.replace(tmp, p)
        return p


def _symlink(link: Path, target: Path) -> None:
    tmp = link.with_name(link.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError:
        pass  # a filesystem without symlinks: the timestamped directory is still there


def is_run_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding at least one of :data:`RUN_MARKERS`."""
    p = Path(path)
    return p.is_dir() and any((p / m).exists() for m in RUN_MARKERS)


def _stamp_key(d: Path) -> tuple[str, int]:
    m = _STAMP.match(d.name)
    return (m.group(1), int(m.group(2) or 0)) if m else ("", 0)


def runs_of(root: Path, test: str) -> list[Path]:
    """Run directories of ``test`` under ``root`` (``<root>/<test>/<stamp>[-n]``, not the ``latest``
    link), newest first by their stamp."""
    d = Path(root) / test
    if not d.is_dir() or d.is_symlink():
        return []
    runs = [r for r in d.iterdir() if not r.is_symlink() and _STAMP.match(r.name) and is_run_dir(r)]
    return sorted(runs, key=_stamp_key, reverse=True)


def tests_in(root: Path) -> list[str]:
    """Names of the tests under ``root`` that have at least one run directory, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(t.name for t in root.iterdir() if t.is_dir() and not t.is_symlink() and runs_of(root, t.name))


def possibly_running(run: Path, now: float | None = None) -> bool:
    """True when ``run`` has no ``results.json`` and one of its files changed in the last
    :data:`ACTIVE_S` seconds: a run in progress (prune leaves it alone)."""
    if (run / "results.json").exists():
        return False
    now = time.time() if now is None else now
    for p in [*(run / m for m in RUN_MARKERS), run / "nemesis.jsonl", run / "logs"]:
        try:
            if now - p.stat().st_mtime < ACTIVE_S:
                return True
        except OSError:
            continue
    return False


def prune(root: Path, test: str, keep_last: int, *, dry_run: bool = False) -> list[Path]:
    """Delete the runs of ``test`` under ``root`` older than its newest ``keep_last``, then repoint
    ``<root>/<test>/latest`` and ``<root>/latest`` (when it pointed at a deleted run). Runs that may
    still be running (:func:`possibly_running`) are kept. Nothing else is rebuilt (``index.html`` still
    lists deleted runs until ``onceproof index``).

    Args:
        root: results root (``results/``).
        test: test name (a directory under ``root``).
        keep_last: runs to keep (newest first); ``0`` or less keeps everything.
        dry_run: only return what would be deleted.

    Returns: the run directories deleted (or that would be), oldest last.

    Raises: ``OSError`` when a directory cannot be deleted.
    """
    if keep_last <= 0:
        return []
    doomed = [r for r in runs_of(root, test)[keep_last:] if not possibly_running(r)]
    if dry_run:
        return doomed
    for r in doomed:
        shutil.rmtree(r)
    fix_latest(root, test)
    return doomed


def prune_all(root: Path, keep_last: int, *, dry_run: bool = False) -> dict[str, list[Path]]:
    """:func:`prune` every test under ``root``; returns ``{test: deleted runs}`` (tests with none left out)."""
    out = {}
    for t in tests_in(root):
        gone = prune(root, t, keep_last, dry_run=dry_run)
        if gone:
            out[t] = gone
    return out


def fix_latest(root: Path, test: str | None = None) -> None:
    """Point ``<root>/<test>/latest`` at the newest run of ``test`` (removed when none is left), and
    ``<root>/latest`` at the newest run of all when its target is gone (removed when no run is left)."""
    root = Path(root)
    if test is not None:
        link = root / test / "latest"
        runs = runs_of(root, test)
        if runs:
            _symlink(link, Path(runs[0].name))
        elif link.is_symlink():
            link.unlink()
    top = root / "latest"
    if top.is_symlink() and not top.exists():
        every = [r for t in tests_in(root) for r in runs_of(root, t)]
        if every:
            newest = max(every, key=_stamp_key)
            _symlink(top, newest.resolve().relative_to(root.resolve()))
        else:
            top.unlink()
