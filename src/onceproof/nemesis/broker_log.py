"""A broker's own log as the faults read it for evidence, wherever it is written: the cluster's
:class:`onceproof.backends.base.LiveLogs` when it has them (the ssh backend: read on the node), else the
``broker-<node>.log`` among its :meth:`Cluster.log_files` (a file on this host: local, docker).

* :func:`broker_log` – the :class:`~onceproof.backends.base.LogSource` of one broker, or ``None``;
* :class:`FileLog` – a log file on this host as a ``LogSource``;
* :func:`size` / :func:`read_since` – its length now, and its text after a byte position (what a fault
  notes before it acts, then reads after).
"""

from __future__ import annotations

from pathlib import Path

from onceproof.backends.base import LiveLogs, LogSource


class FileLog:
    """The log file ``path`` on this host as a :class:`LogSource` (it may not exist yet)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def read_from(self, pos: int) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(pos)
                return f.read()
        except OSError:
            return b""

    def __repr__(self) -> str:
        return f"FileLog({str(self.path)!r})"


def broker_log(cluster, node: int) -> LogSource | None:
    """Broker ``node``'s log: ``cluster.broker_log(node)`` when its class implements :class:`LiveLogs`, else
    the ``broker-<node>.log`` of its ``log_files()`` as a :class:`FileLog`; ``None`` when there is none."""
    if cluster is None:
        return None
    if issubclass(type(cluster), LiveLogs):
        return cluster.broker_log(node)
    for p in cluster.log_files():
        if p.name == f"broker-{node}.log":
            return FileLog(p)
    return None


def size(cluster, node: int) -> int:
    """Bytes in broker ``node``'s log now (0 without one): where a fault starts reading."""
    log = broker_log(cluster, node)
    return log.size() if log is not None else 0


def read_since(cluster, node: int, since: int) -> str:
    """Broker ``node``'s log from byte ``since`` on, decoded (undecodable bytes replaced); ``""`` when none."""
    log = broker_log(cluster, node)
    return log.read_from(since).decode(errors="replace") if log is not None else ""
