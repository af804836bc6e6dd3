"""Append-only JSON-lines histories (``history.jsonl``, ``nemesis.jsonl``), written as the test runs.

An op is a flat JSON object in Jepsen's shape::

    {"index": 17, "time": 1234567890, "process": 0, "type": "invoke", "f": "send", "key": "k3", "seq": 4}

``type`` is ``invoke`` then one of ``ok`` / ``fail`` / ``info`` (indeterminate) for the same process;
``time`` is nanoseconds since the test started. Every line is flushed when written, so a crashed run
leaves a history that :func:`read` can still load (a torn last line is dropped with a warning).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pandas as pd

log = logging.getLogger("onceproof.history")


class HistoryWriter:
    """Thread-safe appender. ``start_ns`` is the test's time origin (``time.monotonic_ns()``)."""

    def __init__(self, path: Path, start_ns: int | None = None):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", buffering=1)  # line-buffered: one write per op
        self._lock = threading.Lock()
        self._index = 0
        self.start_ns = start_ns if start_ns is not None else time.monotonic_ns()

    def append(self, op: dict) -> dict:
        """Stamp ``op`` with ``index``, ``time`` (ns since start) and ``wall`` (epoch s); write it; return it."""
        with self._lock:
            op = {"index": self._index, "time": time.monotonic_ns() - self.start_ns,
                  "wall": round(time.time(), 3), **op}
            self._index += 1
            self._f.write(json.dumps(op, separators=(",", ":")) + "\n")
        return op

    def close(self) -> None:
        with self._lock:
            self._f.close()


def read(path: Path, problems: list[str] | None = None) -> pd.DataFrame:
    """Load a history file into a DataFrame (one row per op). Missing file → empty frame.

    A torn final line (the writer crashed mid-write) is skipped: reported in ``problems`` when given,
    else logged as a warning. A torn line elsewhere raises ``ValueError`` naming the file and line,
    since that means the file was edited or corrupted.
    """
    if not path.exists():
        return pd.DataFrame()
    rows = []
    lines = path.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            op = json.loads(line)
        except ValueError:
            op = None
        if isinstance(op, dict):
            rows.append(op)
            continue
        if i == len(lines) - 1:
            msg = f"{path}: dropped a torn last line ({i + 1})"
            if problems is None:
                log.warning("%s", msg)
            else:
                problems.append(msg)
            continue
        raise ValueError(f"{path}:{i + 1} is not a JSON object; the file is corrupt")
    return pd.DataFrame.from_records(rows)
