"""The result store: ``results/<test>/<YYYYmmddTHHMMSS>/`` per run, ``results/latest`` → newest.

Files in a run directory (DESIGN §5): ``test.json`` (config, seed, versions), ``history.jsonl``,
``nemesis.jsonl``, ``sink.jsonl``, ``results.json``, ``input.parquet`` / ``output.parquet`` (the topics as
read for the check, so ``onceproof check RUN_DIR`` can re-check offline), ``logs/`` (brokers, drivers and
executors), ``control/`` and ``checkpoint/`` (the pipeline's own state).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

DEFAULT_ROOT = Path(os.environ.get("ONCEPROOF_RESULTS", "results"))


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
