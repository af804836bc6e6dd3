"""Disk retention: delete a test's older runs and keep the ``latest`` links right.

Runs are found with :func:`onceproof.store.runs.runs_of`; a run that may still be running
(:func:`possibly_running`) is never deleted. ``index.html`` is not rebuilt here (``onceproof index``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from onceproof.store.runfiles import MARKERS, RunFiles
from onceproof.store.runs import LATEST, repoint, runs_of, stamp_key, tests_in

# A run without results.json whose files changed this recently (seconds) may still be running.
ACTIVE_S = 3600.0


def possibly_running(run: Path, now: float | None = None) -> bool:
    """True when ``run`` has no ``results.json`` and one of its files changed in the last
    :data:`ACTIVE_S` seconds: a run in progress (prune leaves it alone)."""
    files = RunFiles(run)
    if files.results.exists():
        return False
    now = time.time() if now is None else now
    for p in [*(files / m for m in MARKERS), files.nemesis, files.logs]:
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
        link = root / test / LATEST
        runs = runs_of(root, test)
        if runs:
            repoint(link, Path(runs[0].name))
        elif link.is_symlink():
            link.unlink()
    top = root / LATEST
    if top.is_symlink() and not top.exists():
        every = [r for t in tests_in(root) for r in runs_of(root, t)]
        if every:
            newest = max(every, key=stamp_key)
            repoint(top, newest.resolve().relative_to(root.resolve()))
        else:
            top.unlink()
