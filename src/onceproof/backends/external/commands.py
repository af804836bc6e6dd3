"""Running the fault map's commands (``fault_map.Command``) where they say: on the harness's machine
(``where = "local"``) or on another one over SSH (``where = "ssh:user@host"``, through the ssh backend's
transport, so host keys are checked against ``[ssh] known_hosts`` exactly as for ``--backend ssh``).

Every command has a deadline that ends it, not only the wait for it: a local one runs in a session of its
own and its whole process group gets SIGTERM at the deadline and SIGKILL 5 s later (``docker compose
kill`` starts children); a remote one runs under the node's ``timeout -k 5`` (``ssh/remote.deadline_argv``).
What a command prints is scrubbed of the run's secrets (``secrets.scrub_text``) before anyone sees it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from onceproof.backends.external.fault_map import Command
from onceproof.backends.ssh.remote import KILL_AFTER_S, TIMED_OUT, Completed, Remote, RemoteError
from onceproof.secrets import Secrets, scrub_text

LOCAL = "local"


class LocalRemote:
    """The harness's own machine, with the ``run`` of :class:`~onceproof.backends.ssh.remote.Remote` (the
    fault map needs no file copies, so no ``put``/``get``). Written here rather than taken from a library: it is
    ``subprocess.run`` plus what it lacks, a deadline that kills the command's process group."""

    name = LOCAL

    def run(self, argv: list[str], *, timeout_s: float = 60.0, stdin: str | None = None,
            root: bool = False) -> Completed:
        """Run ``argv`` (no shell) in a new session; at ``timeout_s`` its group gets SIGTERM, and SIGKILL
        :data:`KILL_AFTER_S` seconds later; it then counts as exit 124 (coreutils ``timeout``'s).
        ``timeout_s`` 0: no deadline. ``root`` is refused (the harness does not escalate locally).

        Raises: :class:`RemoteError` when the program does not exist or cannot be started."""
        if root:
            raise RemoteError(f"[{LOCAL}] {argv[0]}: a local fault command runs as the harness's user; put sudo "
                              "in the command itself if it needs root")
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(list(argv), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                 start_new_session=True)
        except OSError as e:
            raise RemoteError(f"[{LOCAL}] {argv[0]}: cannot start: {e.strerror}") from None
        try:
            out, err = p.communicate(stdin, timeout=timeout_s or None)
            code = p.returncode
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGTERM)
            try:
                out, err = p.communicate(timeout=KILL_AFTER_S)
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                out, err = p.communicate()
            code = TIMED_OUT
        finally:
            if p.poll() is None:  # an interrupt (Ctrl-C) while waiting: nothing may outlive the harness
                _signal_group(p.pid, signal.SIGKILL)
                p.wait()
        return Completed(node=LOCAL, argv=tuple(argv), returncode=code, stdout=out or "", stderr=err or "",
                         seconds=time.monotonic() - t0)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


class CommandRunner:
    """Runs :class:`Command` s on their ``where``, scrubbing ``secrets`` from what they print.

    Args:
        remotes: ``{where: Remote}`` for the ``ssh:`` targets (built by the backend from ``[ssh]``); ``local``
            is always there.
        secrets: the run's secrets (the Kafka password and its forms).
    """

    def __init__(self, remotes: dict[str, Remote] | None = None, secrets: Secrets | None = None) -> None:
        self._remotes: dict[str, Remote | LocalRemote] = {LOCAL: LocalRemote(), **(remotes or {})}
        self._secrets = secrets or Secrets()

    def run(self, cmd: Command) -> Completed:
        """Run ``cmd`` and return its outcome (``stdout``/``stderr`` scrubbed). A non-zero exit is returned,
        not raised: the caller records it as the fault's evidence.

        Raises: :class:`RemoteError` when ``cmd.where`` names no known target or the command cannot be started."""
        remote = self._remotes.get(cmd.where)
        if remote is None:
            raise RemoteError(f"{cmd.where}: no such command target; known: {', '.join(sorted(self._remotes))}")
        done = remote.run(list(cmd.argv), timeout_s=cmd.timeout_s)
        if not self._secrets:
            return done
        return Completed(node=done.node, argv=done.argv, returncode=done.returncode,
                         stdout=scrub_text(done.stdout, self._secrets), stderr=scrub_text(done.stderr, self._secrets),
                         seconds=done.seconds)
