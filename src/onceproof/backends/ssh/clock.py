"""A process's own clock on a node of ``--backend ssh``, offset through libfaketime's control file on that node
(the same variables and file format as the local backend's, ``backends/common/faketime.py``); the node's
clock is never changed. Used by the brokers (``ClockFaults``, ``backends/ssh/kafka.py``) and the driver
(``DriverClock``, ``backends/ssh/app.py``).

The library must be installed on the node (Debian/Ubuntu: ``apt-get install libfaketime``); onceproof ships
no native code to nodes. :func:`find_library` looks where the distributions put it (``faketime.LIB_GLOBS``).
The offset file lives in the run's directory on the node, so the node's sweep removes it with the run; the
skewed processes die in that sweep (or with the run's lease), so no skewed process outlives the run.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from onceproof.backends.common import faketime
from onceproof.backends.ssh.remote import Remote

FIX = "install libfaketime on that node (Debian/Ubuntu: apt-get install libfaketime)"


def find_library(remote: Remote) -> str | None:
    """The first ``libfaketime.so.1`` of ``faketime.LIB_GLOBS`` that exists on the node; ``None`` when none.
    Raises: ``RemoteError`` when the node cannot be reached."""
    globs = " ".join(faketime.LIB_GLOBS)  # unquoted on purpose: the node's shell expands them
    done = remote.run(["sh", "-c", f'for f in {globs}; do [ -f "$f" ] && echo "$f" && break; done; true'],
                      timeout_s=30)
    found = done.stdout.strip().splitlines()
    return found[0] if found else None


def missing(remote: Remote, lib: str | None) -> str | None:
    """Why a process on ``remote`` cannot be skewed (``lib`` as :func:`find_library` found it), naming the fix;
    ``None`` when it can."""
    if lib:
        return None
    return f"libfaketime is not installed on {remote.name} (no {', '.join(faketime.LIB_GLOBS)}): {FIX}"


def write_offset(remote: Remote, path: PurePosixPath, seconds: float) -> None:
    """Set the offset file ``path`` on the node to ``seconds`` (``faketime.format_offset``: whole seconds),
    atomically (a temporary file renamed over it).

    Raises: ``ValueError`` for a fractional offset; ``RemoteError`` when the node cannot be reached or the
    write fails."""
    line = faketime.format_offset(seconds)
    remote.run(["sh", "-c", 'printf "%s\\n" "$1" > "$2.tmp" && mv -f "$2.tmp" "$2"', "sh", line, str(path)],
               timeout_s=30).check()


def preload(lib: str, path: PurePosixPath) -> dict[str, str]:
    """The environment a process on the node starts with to follow ``path`` (``faketime.preload_vars``)."""
    return faketime.preload_vars(lib, str(path))

