"""Commands to a session's supervisor: a spool directory, not a socket.

The CLI writes ``<dir>/commands/<seq>-<id>.json`` atomically (a temp file renamed into place) and waits
for ``<dir>/replies/<same name>``; the supervisor takes pending commands in name order, executes them
and answers. Why files: no port to lease or free, nothing to clean up if either side dies, a command
survives a restart of either side, and every command stays on disk next to the run it changed.

Command: ``{"cmd": "nemesis"|"heal"|"status"|"stop", "args": {...}, "sent": <epoch s>}``; reply:
``{"ok": bool, "message": str, ...}`` (``ok`` false: refused, ``message`` says why and the fix).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


class SpoolTimeout(TimeoutError):
    """No reply in time: the supervisor is busy or gone (``onceproof session status`` tells which)."""


@dataclass(frozen=True)
class Command:
    """A pending command: its file name (``<seq>-<id>.json``), ``cmd``, ``args`` and ``sent`` (epoch s)."""

    name: str
    cmd: str
    args: dict
    sent: float


def _write_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


class Spool:
    """The spool under ``root`` (``commands/`` and ``replies/``, made on first use)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.commands, self.replies = self.root / "commands", self.root / "replies"

    def send(self, cmd: str, args: dict | None = None) -> str:
        """Queue a command; returns its name (for :meth:`wait`)."""
        self.commands.mkdir(parents=True, exist_ok=True)
        self.replies.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        _write_atomic(self.commands / name, {"cmd": cmd, "args": args or {}, "sent": time.time()})
        return name

    def wait(self, name: str, timeout_s: float, alive=lambda: True) -> dict:
        """The reply to command ``name``, polled every 0.1 s for up to ``timeout_s`` seconds while
        ``alive()`` holds. Raises: :class:`SpoolTimeout` (the message says whether the supervisor died)."""
        deadline = time.monotonic() + timeout_s
        p = self.replies / name
        while time.monotonic() < deadline:
            if p.exists():
                return json.loads(p.read_text())
            if not alive():
                raise SpoolTimeout("the session's supervisor is gone: `onceproof session stop` collects what it left")
            time.sleep(0.1)
        raise SpoolTimeout(f"no answer in {timeout_s:.0f} s: the session is busy (stopping, or a fault's heal)")

    def pending(self) -> list[Command]:
        """Commands without a reply, oldest first (a malformed file is answered as refused and skipped)."""
        if not self.commands.is_dir():
            return []
        out = []
        for p in sorted(self.commands.glob("*.json")):
            if (self.replies / p.name).exists():
                continue
            try:
                doc = json.loads(p.read_text())
                out.append(Command(p.name, str(doc["cmd"]), dict(doc.get("args") or {}), float(doc.get("sent", 0))))
            except (OSError, ValueError, KeyError, TypeError) as e:
                self.answer(p.name, {"ok": False, "message": f"unreadable command file {p}: {e}"})
        return out

    def answer(self, name: str, reply: dict) -> None:
        """Write the reply to command ``name``."""
        self.replies.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.replies / name, reply)
