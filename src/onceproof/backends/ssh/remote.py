"""What the ssh (and later the external) backend needs of a machine it does not own: run a command,
copy a file there and back. Jepsen's ``jepsen.control`` ``Remote`` protocol (``connect``, ``execute!``,
``upload!``, ``download!``: jepsen-io/jepsen, ``jepsen/src/jepsen/control/core.clj``) in Python terms.

* :class:`Remote` – the protocol (:class:`onceproof.backends.ssh.transport.SshRemote` implements it over
  SSH);
* :class:`Completed` – one command's outcome;
* :func:`deadline_argv` – the command wrapped so that its deadline holds *on the node* (see there).

Commands are argv lists, never shell strings: :func:`shlex.join` quotes them for the remote shell.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

KILL_AFTER_S = 5
"""``timeout -k``: seconds between the command's SIGTERM at its deadline and its SIGKILL."""
TIMED_OUT = 124
"""coreutils ``timeout``'s exit status when the deadline passed (137 when it had to SIGKILL)."""


class RemoteError(RuntimeError):
    """A command could not be run on a node, or a checked one failed; the message names the node."""


@dataclass(frozen=True)
class Completed:
    """One remote command's outcome.

    Attributes:
        node: the node's name.
        argv: the command as asked (without the deadline and privilege wrapping).
        returncode: its exit status; ``timeout``'s 124 (or 137) when its deadline passed on the node.
        stdout / stderr: its output, decoded as UTF-8 (undecodable bytes replaced).
        seconds: wall time on the harness, seconds.
    """

    node: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        """Whether the node's ``timeout`` ended the command (exit 124, or 137 after its SIGKILL)."""
        return self.returncode in (TIMED_OUT, 128 + 9)

    def check(self) -> Completed:
        """Itself when the command exited 0. Raises: :class:`RemoteError` with its status and stderr."""
        if self.returncode != 0:
            tail = (self.stderr or self.stdout).strip()[-500:]
            what = "timed out" if self.timed_out else f"exited {self.returncode}"
            raise RemoteError(f"[{self.node}] {shlex.join(self.argv)} {what}: {tail}")
        return self


def deadline_argv(argv: list[str] | tuple[str, ...], timeout_s: float, *, become: str = "") -> list[str]:
    """``argv`` as run on the node: under coreutils ``timeout -k 5 <t>`` (an SSH client's own timeout only
    stops waiting: the remote process would run on), and after ``sudo -n`` when ``become`` is ``"sudo"``.

    Raises: ``ValueError`` for an empty argv or a deadline ≤ 0.
    """
    if not argv:
        raise ValueError("empty command")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    wrapped = ["timeout", "-k", str(KILL_AFTER_S), f"{timeout_s:g}", *argv]
    return ["sudo", "-n", *wrapped] if become == "sudo" else wrapped


@runtime_checkable
class Remote(Protocol):
    """One machine's commands and files (the ssh backend's only way to touch a node)."""

    name: str

    def run(self, argv: list[str], *, timeout_s: float = 60.0, stdin: str | None = None,
            root: bool = False) -> Completed:
        """Run ``argv`` and wait for it (at most ``timeout_s`` + a grace); ``root``: with the inventory's
        ``become``. Raises: :class:`RemoteError` when the node cannot be reached."""

    def put(self, local: Path, remote: PurePosixPath, *, mode: int | None = None, timeout_s: float = 300.0) -> None:
        """Copy the file ``local`` to ``remote`` (atomically: a temporary name, then a rename)."""

    def get(self, remote: PurePosixPath, local: Path, *, timeout_s: float = 300.0) -> None:
        """Copy the node's file ``remote`` to ``local``."""
