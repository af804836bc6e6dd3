"""Append-only JSON-lines histories (``history.jsonl``, ``nemesis.jsonl``), written as the test runs.

An op is a flat JSON object in Jepsen's shape::

    {"index": 17, "time": 1234567890, "process": 0, "type": "invoke", "f": "send", "key": "k3", "seq": 4}

``type`` is ``invoke`` then one of ``ok`` / ``fail`` / ``info`` (indeterminate) for the same process;
``time`` is nanoseconds since the test started. Every line is flushed when written, so a crashed run
leaves a history that ``onceproof.store.readers.read_history`` can still load (a torn last line is dropped with a
warning).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


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

