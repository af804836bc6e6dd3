"""The results root: ``<root>/<test>/<YYYYmmddTHHMMSS>[-n]/`` per run, ``<root>/latest`` and
``<root>/<test>/latest`` → the newest.

This module creates run directories (:class:`RunDir`) and recognises them (:func:`is_run_dir`,
:func:`runs_of`, :func:`tests_in`, :func:`find_runs`); deleting old ones is :mod:`onceproof.store.retention`, the
files inside one are :mod:`onceproof.store.runfiles`. Standard library only (the CLI and the config import it).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from onceproof.store.runfiles import MARKERS, RESULTS, TEST, RunFiles

DEFAULT_ROOT = Path(os.environ.get("ONCEPROOF_RESULTS", "results"))
LATEST = "latest"  # <root>/latest and <root>/<test>/latest: symlinks to the newest run
INDEX = "index.html"  # <root>/index.html: every run, written by onceproof.report.index
ASSETS = "assets"  # <root>/assets/: files the reports of every run share (plotly's JS), report.html
_STAMP = re.compile(r"^(\d{8}T\d{6})(?:-(\d+))?$")


class RunDir(RunFiles):
    """A new run's directory, created with its ``logs/`` and ``control/``. Creating it also repoints
    ``<root>/latest`` and ``<root>/<test>/latest``.

    Args:
        root: results root; test: test name (a directory under ``root``); stamp: the run's directory
            name (default: now, ``YYYYmmddTHHMMSS``; ``-1``, ``-2``, ... appended when taken).
    """

    def __init__(self, root: Path, test: str, stamp: str | None = None):
        stamp = stamp or time.strftime("%Y%m%dT%H%M%S")
        path = (root / test / stamp).resolve()
        n = 1
        while path.exists():  # two runs in the same second
            path = (root / test / f"{stamp}-{n}").resolve()
            n += 1
        super().__init__(path)
        for sub in (self.logs, self.control):
            sub.mkdir(parents=True, exist_ok=True)
        repoint(root / LATEST, self.path.relative_to(root.resolve()))
        repoint(root / test / LATEST, Path(self.path.name))

    def write_json(self, name: str, obj) -> Path:
        """Write ``obj`` as indented JSON to the file ``name`` (a :mod:`onceproof.store.runfiles` name) atomically
        (tmp + rename); returns its path."""
        p = self.path / name
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, default=str))
        os.replace(tmp, p)
        return p


def repoint(link: Path, target: Path) -> None:
    """Make ``link`` a symlink to ``target`` atomically (tmp + rename); a filesystem without symlinks
    is left alone (the timestamped directories are still there)."""
    tmp = link.with_name(link.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError:
        pass


def is_run_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding at least one of :data:`onceproof.store.runfiles.MARKERS`."""
    p = Path(path)
    return p.is_dir() and any((p / m).exists() for m in MARKERS)


def stamp_key(d: Path) -> tuple[str, int]:
    """Sort key of a run directory by its name: ``(YYYYmmddTHHMMSS, n)``; ``("", 0)`` for another name."""
    m = _STAMP.match(d.name)
    return (m.group(1), int(m.group(2) or 0)) if m else ("", 0)


def runs_of(root: Path, test: str) -> list[Path]:
    """Run directories of ``test`` under ``root`` (``<root>/<test>/<stamp>[-n]``, not the ``latest``
    link), newest first by their stamp."""
    d = Path(root) / test
    if not d.is_dir() or d.is_symlink():
        return []
    runs = [r for r in d.iterdir() if not r.is_symlink() and _STAMP.match(r.name) and is_run_dir(r)]
    return sorted(runs, key=stamp_key, reverse=True)


def tests_in(root: Path) -> list[str]:
    """Names of the tests under ``root`` that have at least one run directory, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(t.name for t in root.iterdir() if t.is_dir() and not t.is_symlink() and runs_of(root, t.name))


def find_runs(results_root: Path) -> list[Path]:
    """The runs the index lists: directories ``results_root/<test>/<any name>/`` holding a
    ``results.json`` or a ``test.json``; the ``latest`` symlinks are skipped so each run is listed once.
    Newest first (by directory name, then test name)."""
    runs = []
    root = Path(results_root)
    if not root.is_dir():
        return []
    for test_dir in root.iterdir():
        if not test_dir.is_dir() or test_dir.is_symlink():
            continue
        for d in test_dir.iterdir():
            if d.is_dir() and not d.is_symlink() and ((d / RESULTS).exists() or (d / TEST).exists()):
                runs.append(d)
    return sorted(runs, key=lambda d: (d.name, d.parent.name), reverse=True)
