"""A session's state file, ``<results root>/.sessions/<id>.json``, written by its supervisor and read by
every CLI command: where the session is (run directory, bootstrap, Spark master), its supervisor's pid,
its phase (``starting`` → ``up`` → ``stopping`` → ``finished``, or ``failed``) and, once finished, the
verdict and exit code. Next to it: ``<id>.log`` (the supervisor's console) and ``<id>/``: its command
spool (:mod:`onceproof.harness.session.spool`) and ``live.json``, the live snapshot ``onceproof watch``
draws (:mod:`onceproof.harness.session.live`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil

DIR = ".sessions"
LIVE = ("starting", "up", "stopping")


def sessions_dir(results_root: str | os.PathLike) -> Path:
    """``<results root>/.sessions``."""
    return Path(results_root) / DIR


def new_id() -> str:
    """A session id: its start time and a pid, sortable (``20261126T224712-12345``)."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


class SessionState:
    """The state file of session ``sid`` under ``results_root``."""

    def __init__(self, results_root: str | os.PathLike, sid: str):
        self.sid = sid
        self.dir = sessions_dir(results_root)
        self.path = self.dir / f"{sid}.json"
        self.log = self.dir / f"{sid}.log"
        self.spool_dir = self.dir / sid
        self.live = self.spool_dir / "live.json"

    def read(self) -> dict:
        """The state (``{}`` before the supervisor wrote any)."""
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def update(self, **fields) -> dict:
        """Merge ``fields`` into the state and write it atomically; returns the new state."""
        doc = {**self.read(), **fields, "updated": time.time()}
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.path)
        return doc

    def supervisor_alive(self) -> bool:
        """Whether the supervisor process named in the state still runs (same pid and start time)."""
        st = self.read()
        pid, created = st.get("pid"), st.get("pid_created")
        if not pid:
            return False
        try:
            p = psutil.Process(int(pid))
            if created is not None and abs(p.create_time() - float(created)) >= 1.0:
                return False  # the pid was reused
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


def find(results_root: str | os.PathLike, sid: str | None = None, live_only: bool = True) -> SessionState | None:
    """Session ``sid``, or the newest one (live ones only, unless ``live_only`` is false) under
    ``results_root``; ``None`` when there is none."""
    d = sessions_dir(results_root)
    if sid:
        s = SessionState(results_root, sid)
        return s if s.path.exists() else None
    for p in sorted(d.glob("*.json"), reverse=True) if d.is_dir() else []:
        if "." in p.stem:  # not a state file (a temp file, another tool's)
            continue
        s = SessionState(results_root, p.stem)
        if not live_only or (s.read().get("state") in LIVE and s.supervisor_alive()):
            return s
    return None
