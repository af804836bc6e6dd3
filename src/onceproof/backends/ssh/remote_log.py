"""A log file on a node, read while it grows: the ssh backend's :class:`onceproof.backends.base.LogSource`
(its brokers' logs, :class:`onceproof.backends.base.LiveLogs`), through two commands on the node: ``stat -c
%s`` for its length and ``tail -c +N`` for what follows a byte position. Each call is one SSH command (tens of
ms); the faults poll it every 0.3 s at most.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from onceproof.backends.ssh.remote import Remote, RemoteError

MAX_READ = 4 << 20
"""The most one :meth:`RemoteLog.read_from` returns (bytes); the next call reads on from there."""


class RemoteLog:
    """The file ``path`` on the node behind ``remote`` (``root``: read with the inventory's ``become``, for a
    file of a process started as root)."""

    def __init__(self, remote: Remote, path: PurePosixPath, root: bool = False):
        self.remote, self.path, self.root = remote, PurePosixPath(path), root

    def size(self) -> int:
        """Its length (bytes); 0 when it does not exist or the node cannot be read."""
        try:
            done = self.remote.run(["stat", "-c", "%s", str(self.path)], timeout_s=15, root=self.root)
        except RemoteError:
            return 0
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else 0

    def read_from(self, pos: int) -> bytes:
        """Its bytes from ``pos`` on (at most :data:`MAX_READ`); ``b""`` when nothing new or unreadable. The
        node's answer is decoded as UTF-8 on the way (``Completed.stdout``), so a log4j log (UTF-8) comes back
        byte for byte."""
        try:
            done = self.remote.run(["sh", "-c", 'tail -c "+$1" "$2" | head -c "$3"', "sh", str(pos + 1),
                                    str(self.path), str(MAX_READ)], timeout_s=30, root=self.root)
        except RemoteError:
            return b""
        return done.stdout.encode() if done.returncode == 0 else b""

    def __repr__(self) -> str:
        return f"RemoteLog({self.remote.name}:{self.path})"
