"""The harness's side of ``onceproof-node.py`` (``backends/ssh/node_helper.py``) on one node: ship it, start
and signal processes through it, hold the run's lease and arm the node's watchdog, sweep.

:class:`NodeHelper` is what the ssh backend's cluster, Spark and network code call; each call is one
short SSH command whose one line of JSON it parses. :class:`Lease` is the harness's heartbeat: one channel
kept open for the run (``hold``), fed a ``beat`` line every :data:`BEAT_S` seconds by a thread. When the
harness dies, even by SIGKILL, its kernel closes the TCP connection, the node's sshd closes the channel,
``hold`` reads the end of its input and writes ``lease.ended``; the watchdog sweeps
:data:`GRACE_S` seconds later. A harness that stops answering without closing (a cut network) stops
beating: the watchdog sweeps once the heartbeat is ``lease_s`` old.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path, PurePosixPath

from onceproof.backends.ssh.remote import Completed, Remote, RemoteError

HELPER_SOURCE = Path(__file__).with_name("node_helper.py")
"""The helper's source, shipped as is."""
BEAT_S = 2.0
"""Seconds between two heartbeats of a :class:`Lease`."""
GRACE_S = 5.0
"""Seconds the watchdog waits after the lease channel closed before it sweeps (a reconnect may come)."""


class NodeHelperError(RemoteError):
    """The helper answered with an error, or not with JSON; the message names the node and the command."""


class NodeHelper:
    """``onceproof-node.py`` on the node behind ``remote``, for run ``run_id`` under ``root``.

    Args:
        remote: the node's :class:`~onceproof.backends.ssh.remote.Remote`.
        root: the directory onceproof owns there (``[run] root``).
        run_id: the run's id (letters, digits, ``._-``); its data is ``<root>/runs/<run_id>/``.
        root_commands: run the helper with the inventory's ``become`` (needed to sweep iptables and tc).
    """

    def __init__(self, remote: Remote, root: PurePosixPath, run_id: str, *, root_commands: bool = False):
        self.remote, self.root, self.run_id, self.root_commands = remote, root, run_id, root_commands

    @property
    def script(self) -> PurePosixPath:
        """Where the helper lives on the node."""
        return self.root / "bin" / "onceproof-node.py"

    @property
    def run_dir(self) -> PurePosixPath:
        """``<root>/runs/<run_id>``."""
        return self.root / "runs" / self.run_id

    def install(self) -> None:
        """Create ``root`` (owned by the login user, through ``become`` when it cannot), mark it as
        onceproof's, and ship the helper. Raises: :class:`RemoteError`."""
        r = self.remote
        probe = r.run(["sh", "-c", 'mkdir -p "$1/bin" 2>/dev/null && test -w "$1"', "sh", str(self.root)], timeout_s=30)
        if probe.returncode != 0:
            user = r.run(["id", "-un"], timeout_s=15).check().stdout.strip()
            r.run(["install", "-d", "-o", user, "-m", "0755", str(self.root), str(self.root / "bin")],
                  timeout_s=30, root=True).check()
        marker = self.root / ".onceproof-root"
        r.run(["touch", str(marker)], timeout_s=15).check()
        r.put(HELPER_SOURCE, self.script, mode=0o755)

    def _call(self, command: str, *args: str, timeout_s: float = 30.0, root: bool | None = None) -> dict:
        argv = ["python3", str(self.script), command, "--root", str(self.root), "--run", self.run_id, *args]
        done: Completed = self.remote.run(argv, timeout_s=timeout_s,
                                          root=self.root_commands if root is None else root)
        line = (done.stdout.strip().splitlines() or [""])[-1]
        try:
            out = json.loads(line)
        except ValueError:
            raise NodeHelperError(f"[{self.remote.name}] onceproof-node.py {command}: exit {done.returncode}, "
                                  f"no JSON answer: {(done.stderr or done.stdout).strip()[-400:]}") from None
        if "error" in out:
            raise NodeHelperError(f"[{self.remote.name}] onceproof-node.py {command}: {out['error']}")
        return out

    def start(self, name: str, argv: list[str], *, log: PurePosixPath, env: dict[str, str] | None = None,
              cwd: PurePosixPath | None = None) -> int:
        """Start ``argv`` as ``name`` (its own session and process group, ``ONCEPROOF_RUN`` set, output to
        ``log``); its pid. Raises: :class:`NodeHelperError`."""
        extra = [f"--env={k}={v}" for k, v in (env or {}).items()]
        if cwd is not None:
            extra.append(f"--cwd={cwd}")
        return int(self._call("start", f"--name={name}", f"--log={log}", *extra, "--", *argv)["pid"])

    def status(self, name: str) -> dict:
        """``{"pid", "state", "exit"}`` of ``name``: ``state`` in psutil's names or ``"gone"``; ``exit``
        ``{"code"|"signal", "time"}`` once it ended (None before)."""
        return self._call("status", f"--name={name}")

    def signal(self, name: str, sig: str) -> dict:
        """Send ``sig`` (``KILL``, ``TERM``, ``STOP``, ``CONT``) to ``name``'s process group if it is still
        ours; ``{"sent": bool, "pid", "why"?}``."""
        return self._call("signal", f"--name={name}", f"--sig={sig}")

    def executors(self, above: int | None = None) -> list[dict]:
        """The run's Spark executor JVMs on the node, each ``{"pid", "id", "start_ticks", "started" (epoch s),
        "cpu_s"}``; with ``above``, only the executor above that process (a task's Python worker), ``[]``
        when none. Raises: :class:`NodeHelperError`, ``RemoteError``."""
        return self._call("executors", *([f"--pid={above}"] if above else []))["executors"]

    def kill_executor(self, pid: int, started: float) -> dict:
        """SIGKILL the run's executor ``pid`` alone if it still started at ``started`` (epoch s, as
        :meth:`executors` gave it) and wait ≤ 10 s; ``{"gone": bool, "why"?}`` (``why`` ``foreign`` or
        ``gone`` when it was not ours any more)."""
        return self._call("kill-executor", f"--pid={pid}", f"--started={started!r}", timeout_s=30.0)

    def disk(self, op: str, path: PurePosixPath, mb: int | None = None) -> dict:
        """The helper's ``disk`` command (``mount``, ``fill``, ``unfill``, ``umount`` a size-limited tmpfs at
        ``path``, inside the run's directory; ``mb`` MiB for ``mount``): its answer. Raises:
        :class:`NodeHelperError` (not root, no ``CAP_SYS_ADMIN``, not a mount of the run's), ``RemoteError``."""
        return self._call("disk", f"--op={op}", f"--path={path}", *([f"--mb={mb}"] if mb else []), timeout_s=120.0,
                          root=True)

    def sweep(self) -> dict:
        """Kill everything of the run on the node and remove its chains, qdiscs and tmpfs mounts (see the helper);
        what was removed (``swept.json``'s content)."""
        return self._call("sweep", timeout_s=60.0)

    def arm_watchdog(self, lease_s: float) -> int:
        """Start the node's watchdog for this run (detached; see the helper); its pid."""
        return int(self._call("watchdog", f"--lease-s={lease_s:g}", f"--grace-s={GRACE_S:g}")["pid"])

    def hold(self) -> Lease:
        """Open the run's lease on the node and start beating it (:class:`Lease`)."""
        argv = ["python3", str(self.script), "hold", "--root", str(self.root), "--run", self.run_id]
        stream = self.remote.stream(argv, root=self.root_commands)
        first = stream.readline(timeout_s=30.0)
        if '"holding"' not in first:
            err = stream.close_and_read_stderr()
            raise NodeHelperError(f"[{self.remote.name}] onceproof-node.py hold did not start: {first.strip()} "
                                  f"{err.strip()[-400:]}")
        return Lease(stream, self.remote.name)


class Lease:
    """The harness's heartbeat on one node (see the module docstring). :meth:`release` ends it cleanly
    (the watchdog then leaves without sweeping); dropping it without release is what a dead harness does."""

    def __init__(self, stream, node: str):
        self.stream, self.node = stream, node
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{node}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            try:
                self.stream.write("beat\n")
            except RemoteError:
                return

    def release(self) -> None:
        """Tell the node the run ended on purpose, and close the channel (bounded, ≤ 15 s)."""
        self._stop.set()
        self._thread.join(BEAT_S + 1)
        try:
            self.stream.write("release\n")
        except RemoteError:
            pass
        self.stream.close()
