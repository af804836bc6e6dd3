"""A broker's log directory on a node of ``--backend ssh`` as a :class:`onceproof.backends.base.LogDir`,
through commands on the node (with the inventory's ``become``: the broker's files are root's when it runs
through ``sudo``). Bytes travel as base64 (``Completed.stdout`` is text), so a segment of a few MB is one
command each way. Used only while the broker is stopped (``corrupt-segment-tail``)."""

from __future__ import annotations

import base64
from pathlib import PurePosixPath

from onceproof.backends.ssh.remote import Remote, RemoteError

_WRITE_AT = ("import base64, os, sys\n"
             "path, pos = sys.argv[1], int(sys.argv[2])\n"
             "data = base64.b64decode(sys.stdin.read())\n"
             "with open(path, 'r+b') as f:\n"
             "    f.seek(pos); f.write(data); f.flush(); os.fsync(f.fileno())\n")


class RemoteDir:
    """The directory ``path`` on the node behind ``remote`` (``root``: its commands run with ``become``)."""

    def __init__(self, remote: Remote, path: PurePosixPath, root: bool = False):
        self.remote, self.path, self.root = remote, PurePosixPath(path), root

    def _run(self, argv: list[str], stdin: str | None = None, timeout_s: float = 60.0):
        try:
            return self.remote.run(argv, timeout_s=timeout_s, stdin=stdin, root=self.root)
        except RemoteError as e:
            raise OSError(str(e)) from None

    def listdir(self, rel: str = "") -> list[str]:
        """Names in ``rel`` (``""``: the directory itself), sorted; ``[]`` when it does not exist or the node
        cannot be read."""
        try:
            done = self._run(["ls", "-1A", str(self.path / rel)], timeout_s=30)
        except OSError:
            return []
        return sorted(done.stdout.split()) if done.returncode == 0 else []

    def read(self, rel: str) -> bytes:
        """The file's bytes. Raises ``OSError`` (the node's error)."""
        done = self._run(["base64", "-w0", str(self.path / rel)], timeout_s=120)
        if done.returncode != 0:
            raise OSError(f"[{self.remote.name}] cannot read {self.path / rel}: {done.stderr.strip()[-300:]}")
        return base64.b64decode(done.stdout)

    def write_at(self, rel: str, pos: int, data: bytes) -> None:
        """Write ``data`` over the file's bytes from ``pos`` in place and fsync it (the node's ``python3``).
        Raises ``OSError``."""
        done = self._run(["python3", "-c", _WRITE_AT, str(self.path / rel), str(pos)],
                         stdin=base64.b64encode(data).decode(), timeout_s=120)
        if done.returncode != 0:
            raise OSError(f"[{self.remote.name}] cannot write {self.path / rel}: {done.stderr.strip()[-300:]}")

    def size(self, rel: str) -> int | None:
        """The file's length (bytes), ``None`` when it does not exist or the node cannot be read."""
        try:
            done = self._run(["stat", "-c", "%s", str(self.path / rel)], timeout_s=30)
        except OSError:
            return None
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else None

    def where(self, rel: str = "") -> str:
        """``<node>:<path>`` of ``rel``, for the evidence."""
        return f"{self.remote.name}:{self.path / rel}" if rel else f"{self.remote.name}:{self.path}"
