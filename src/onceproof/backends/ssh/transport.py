"""SSH to the nodes of an :class:`~onceproof.backends.ssh.inventory.Inventory`, on asyncssh (2.24).

:class:`SshHub` keeps one SSH connection per node for the whole run, on one asyncio loop in a daemon
thread, and gives the threaded harness (nemesis, supervisor and relay threads) blocking calls through
:class:`SshRemote`, the :class:`~onceproof.backends.ssh.remote.Remote` of one node.

Host keys are always checked against ``[ssh] known_hosts``: asyncssh checks against the file given as
``known_hosts`` and only an explicit ``None`` would disable checking (asyncssh ``connection.py``,
``SSHClientConnectionOptions``: "If this is explicitly set to None, server host key validation will be
disabled"); this module never passes ``None``. An unknown or changed key is a :class:`HostKeyError`
naming the key offered (its SHA256 fingerprint, as ``ssh-keygen -lf`` prints it) and the fix;
:func:`trust` is the only thing that adds a key, and only when its caller says yes.

Deadlines: asyncssh's ``run(timeout=)`` only stops *waiting* and leaves the remote process running, so a
command runs under the node's ``timeout -k 5 <t>`` (:func:`~onceproof.backends.ssh.remote.deadline_argv`),
and the harness gives up on the channel ``KILL_AFTER_S`` + :data:`GRACE_S` later.

Why asyncssh rather than paramiko or fabric: the known_hosts default above (paramiko's safe
``RejectPolicy`` is one line away from ``AutoAddPolicy``, as ducktape's ``remoteaccount.py`` shows),
pipelined SFTP for the Python site the backend ships, and the fewest new dependencies
(``docs/research/issue28/design.md`` §2.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import asyncssh

from onceproof.backends.ssh.inventory import Inventory, Node
from onceproof.backends.ssh.remote import KILL_AFTER_S, Completed, RemoteError, deadline_argv

T = TypeVar("T")

GRACE_S = 10.0
"""Seconds the harness waits for a channel beyond a command's deadline and its SIGKILL on the node."""
HOST_KEY_ALGS = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                 "rsa-sha2-512", "rsa-sha2-256")
"""The host key a node is asked for when it is read (to trust it, or to name it in an error), in OpenSSH's
order of preference (``ssh_config(5)`` ``HostKeyAlgorithms``: ed25519 before ECDSA before RSA), so the key
added is the one ``ssh`` and sshd's ``ssh-keyscan`` would show first."""
KEEPALIVE_S = 5
"""``keepalive_interval``: a silent connection is probed this often, seconds; 3 unanswered probes
(``keepalive_count_max``) close it."""


class SshError(RemoteError):
    """A node could not be reached over SSH (refused, timed out, authentication failed)."""


class HostKeyError(SshError):
    """A node's host key is not in ``known_hosts`` (unknown), or differs from the one there (changed).

    Attributes:
        node: the node's name.
        fingerprint: the SHA256 fingerprint of the key the node offered ("" if it could not be read).
        changed: True when ``known_hosts`` holds another key for that host.
    """

    def __init__(self, message: str, node: str, fingerprint: str, changed: bool):
        super().__init__(message)
        self.node, self.fingerprint, self.changed = node, fingerprint, changed


def _known_host_keys(known_hosts: Path, host: str, port: int) -> list[asyncssh.SSHKey]:
    """The keys ``known_hosts`` trusts for ``host``:``port`` (``[host]:port`` entries for a port ≠ 22)."""
    if not known_hosts.exists():
        return []
    keys, *_ = asyncssh.read_known_hosts(str(known_hosts)).match(host, "", port)
    return list(keys)


def known_hosts_line(host: str, port: int, key: asyncssh.SSHKey) -> str:
    """One ``known_hosts`` line for ``key`` at ``host``:``port`` (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT":
    ``[host]:port`` when the port is not 22)."""
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key.export_public_key().decode().strip()}\n"


class SshHub:
    """One SSH connection per node, opened on first use and kept for the run.

    Use as a context manager or call :meth:`close`; every connection and the loop thread end there.

    Args:
        inventory: the nodes and ``[ssh]`` settings.
    """

    def __init__(self, inventory: Inventory):
        self.inventory = inventory
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ssh-hub", daemon=True)
        self._thread.start()
        self._conns: dict[str, asyncssh.SSHClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False

    # ------------------------------------------------------------------------------------ plumbing
    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the hub's loop and wait ≤ ``timeout_s`` seconds for it.

        Raises: what ``coro`` raises; :class:`SshError` when the wait ran out (the coroutine is cancelled).
        """
        if self._closed:
            coro.close()
            raise SshError("the SSH hub is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout_s)
        except TimeoutError:
            fut.cancel()
            raise SshError(f"no answer over SSH within {timeout_s:.0f} s") from None

    async def _connection(self, node: Node) -> asyncssh.SSHClientConnection:
        lock = self._locks.setdefault(node.name, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node.name)
            if conn is not None and not conn.is_closed():
                return conn
            conn = await self._open(node)
            self._conns[node.name] = conn
            return conn

    async def _open(self, node: Node) -> asyncssh.SSHClientConnection:
        s = self.inventory.ssh
        if not s.known_hosts.exists():
            raise HostKeyError(f"[{node.name}] known_hosts file {s.known_hosts} does not exist: create it with "
                               f"`onceproof ssh trust --nodes {self.inventory.path}` (it asks before adding a key)",
                               node.name, "", False)
        keys: dict[str, Any] = {}
        if node.key_file is not None:
            if not node.key_file.exists():
                raise SshError(f"[{node.name}] key_file {node.key_file} does not exist: fix [ssh] key_file "
                               f"(or the node's key_file) in {self.inventory.path}")
            keys = {"client_keys": [str(node.key_file)], "agent_path": None,
                    "passphrase": None}
        try:
            return await asyncssh.connect(
                node.host, node.port, username=node.user, known_hosts=str(s.known_hosts), config=None,
                connect_timeout=s.connect_timeout_s, keepalive_interval=KEEPALIVE_S, keepalive_count_max=3,
                **keys)
        except asyncssh.HostKeyNotVerifiable:
            raise await self._host_key_error(node) from None
        except asyncssh.PermissionDenied as e:
            raise SshError(f"[{node.name}] {node.user}@{node.host}:{node.port} refused the key "
                           f"({node.key_file or 'ssh-agent'}): {e.reason}; put its public key in the node's "
                           "authorized_keys") from None
        except (OSError, asyncssh.Error, TimeoutError) as e:
            raise SshError(f"[{node.name}] cannot connect to {node.host}:{node.port} over SSH: "
                           f"{type(e).__name__}: {e}") from None

    async def _host_key_error(self, node: Node) -> HostKeyError:
        s = self.inventory.ssh
        try:
            offered = await asyncssh.get_server_host_key(node.host, node.port, config=None,
                                                         server_host_key_algs=list(HOST_KEY_ALGS))
        except (OSError, asyncssh.Error):
            offered = None
        fp = offered.get_fingerprint() if offered is not None else ""
        known = _known_host_keys(s.known_hosts, node.host, node.port)
        if known:
            msg = (f"[{node.name}] the host key of {node.host}:{node.port} CHANGED: it offers {fp or 'a key'}, "
                   f"{s.known_hosts} holds {', '.join(k.get_fingerprint() for k in known)}. If the machine was "
                   "rebuilt, remove its old line (`ssh-keygen -R` with -f the file) and run `onceproof ssh "
                   f"trust --nodes {self.inventory.path}`; otherwise someone may be in the middle")
        else:
            msg = (f"[{node.name}] the host key of {node.host}:{node.port} is unknown: it offers {fp or 'a key'}, "
                   f"not in {s.known_hosts}. Check that fingerprint out of band, then run `onceproof ssh trust "
                   f"--nodes {self.inventory.path}`")
        return HostKeyError(msg, node.name, fp, bool(known))

    # ------------------------------------------------------------------------------------ public
    def remote(self, name: str) -> SshRemote:
        """The :class:`SshRemote` of the node called ``name``. Raises: ``KeyError``."""
        return SshRemote(self, self.inventory.node(name))

    def remotes(self) -> list[SshRemote]:
        """One :class:`SshRemote` per node, in the inventory's order."""
        return [SshRemote(self, n) for n in self.inventory.nodes]

    def connect_all(self) -> None:
        """Open every node's connection now (in parallel), so that a bad key or host fails before anything
        starts. Raises: the first node's :class:`SshError` / :class:`HostKeyError` in inventory order."""
        async def _all() -> list[BaseException | None]:
            res = await asyncio.gather(*(self._connection(n) for n in self.inventory.nodes), return_exceptions=True)
            return [r if isinstance(r, BaseException) else None for r in res]
        errors = self.call(_all(), self.inventory.ssh.connect_timeout_s * 2 + 10)
        for e in errors:
            if e is not None:
                raise e

    def drop(self, name: str) -> None:
        """Close one node's connection (the next call opens a new one)."""
        async def _drop() -> None:
            conn = self._conns.pop(name, None)
            if conn is not None:
                conn.abort()
        with contextlib.suppress(SshError):
            self.call(_drop(), 10)

    def close(self) -> None:
        """Close every connection and stop the loop thread (idempotent; bounded: ≤ 15 s)."""
        if self._closed:
            return

        async def _close_all() -> None:
            for conn in list(self._conns.values()):
                conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*(c.wait_closed() for c in self._conns.values())), 5)
            self._conns.clear()
        with contextlib.suppress(Exception):
            self.call(_close_all(), 10)
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> SshHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SshRemote:
    """One node's :class:`~onceproof.backends.ssh.remote.Remote` over its :class:`SshHub` connection."""

    def __init__(self, hub: SshHub, node: Node):
        self.hub, self.node, self.name = hub, node, node.name

    def run(self, argv: list[str], *, timeout_s: float = 60.0, stdin: str | None = None,
            root: bool = False) -> Completed:
        """Run ``argv`` on the node under its deadline (see the module docstring) and wait for it.

        Args:
            argv: the command; quoted with :func:`shlex.join` for the remote shell.
            timeout_s: its deadline on the node, seconds; the node SIGTERMs it then, SIGKILLs it 5 s later.
            stdin: text fed to its standard input (then closed).
            root: run it with ``[ssh] become`` (``sudo -n``) unless the login is root.

        Returns: :class:`~onceproof.backends.ssh.remote.Completed`; a non-zero exit is not an error here
        (call ``.check()``).

        Raises: :class:`SshError` when the node cannot be reached or the channel outlives the deadline.
        """
        become = self.hub.inventory.ssh.become if root and self.node.user != "root" else ""
        wrapped = deadline_argv(argv, timeout_s, become=become)
        cmd = shlex.join(wrapped)
        t0 = time.monotonic()

        async def _run() -> asyncssh.SSHCompletedProcess:
            conn = await self.hub._connection(self.node)
            return await conn.run(cmd, input=stdin, check=False, timeout=timeout_s + KILL_AFTER_S + GRACE_S)

        try:
            p = self.hub.call(_run(), timeout_s + KILL_AFTER_S + GRACE_S + self.hub.inventory.ssh.connect_timeout_s)
        except asyncssh.TimeoutError:
            raise SshError(f"[{self.name}] {shlex.join(argv)}: the channel outlived its deadline "
                           f"({timeout_s:g} s + {KILL_AFTER_S} s + {GRACE_S:g} s)") from None
        except (asyncssh.Error, OSError) as e:
            raise SshError(f"[{self.name}] {shlex.join(argv)}: {type(e).__name__}: {e}") from None
        rc = p.exit_status if p.exit_status is not None else 128 + _signal_number(p.exit_signal)
        return Completed(self.name, tuple(argv), rc, _text(p.stdout), _text(p.stderr), time.monotonic() - t0)

    def put(self, local: Path, remote: PurePosixPath, *, mode: int | None = None,
            timeout_s: float = 300.0) -> None:
        """Copy ``local`` to ``remote`` through SFTP: to ``<remote>.partial`` first, then renamed
        (``posix_rename``, OpenSSH's extension), so a reader never sees half a file.

        Raises: :class:`SshError`.
        """
        tmp = f"{remote}.partial"

        async def _put() -> None:
            conn = await self.hub._connection(self.node)
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(local), tmp)
                if mode is not None:
                    await sftp.chmod(tmp, mode)
                await sftp.posix_rename(tmp, str(remote))
        self._sftp(_put, f"put {local} → {remote}", timeout_s)

    def get(self, remote: PurePosixPath, local: Path, *, timeout_s: float = 300.0) -> None:
        """Copy the node's ``remote`` to ``local`` through SFTP. Raises: :class:`SshError`."""
        async def _get() -> None:
            conn = await self.hub._connection(self.node)
            async with conn.start_sftp_client() as sftp:
                await sftp.get(str(remote), str(local))
        self._sftp(_get, f"get {remote} → {local}", timeout_s)

    def stream(self, argv: list[str], *, root: bool = False) -> RemoteStream:
        """Start ``argv`` on the node and keep its channel open: the caller writes lines to its stdin and
        closes it when done (a lease held for the run, see ``backends/ssh/node.py``). No deadline: it lives
        as long as the channel does; when the harness or its connection dies, the node's sshd closes the
        channel and the process reads the end of its input.

        Raises: :class:`SshError` when it cannot be started.
        """
        become = self.hub.inventory.ssh.become if root and self.node.user != "root" else ""
        cmd = shlex.join((["sudo", "-n"] if become == "sudo" else []) + list(argv))

        async def _start() -> asyncssh.SSHClientProcess:
            conn = await self.hub._connection(self.node)
            return await conn.create_process(cmd)
        try:
            proc = self.hub.call(_start(), self.hub.inventory.ssh.connect_timeout_s + 10)
        except (asyncssh.Error, OSError) as e:
            raise SshError(f"[{self.name}] {shlex.join(argv)}: {type(e).__name__}: {e}") from None
        return RemoteStream(self, proc)

    def _sftp(self, fn: Callable[[], Coroutine[Any, Any, None]], what: str, timeout_s: float) -> None:
        try:
            self.hub.call(fn(), timeout_s)
        except (asyncssh.Error, OSError) as e:
            raise SshError(f"[{self.name}] {what}: {type(e).__name__}: {e}") from None


class RemoteStream:
    """A process on a node whose stdin the harness writes to (:meth:`SshRemote.stream`)."""

    def __init__(self, remote: SshRemote, proc: asyncssh.SSHClientProcess):
        self.remote, self._proc = remote, proc

    def write(self, text: str, timeout_s: float = 10.0) -> None:
        """Send ``text`` to the process's stdin. Raises: :class:`SshError` when the channel is gone."""
        async def _w() -> None:
            self._proc.stdin.write(text)
            await self._proc.stdin.drain()
        try:
            self.remote.hub.call(_w(), timeout_s)
        except (asyncssh.Error, OSError, BrokenPipeError) as e:
            raise SshError(f"[{self.remote.name}] stream closed: {type(e).__name__}: {e}") from None

    def readline(self, timeout_s: float = 10.0) -> str:
        """One line of the process's stdout ("" at its end or after ``timeout_s``)."""
        async def _r() -> str:
            return await asyncio.wait_for(self._proc.stdout.readline(), timeout_s)
        try:
            return _text(self.remote.hub.call(_r(), timeout_s + 2))
        except (asyncssh.Error, OSError, TimeoutError, SshError):
            return ""

    def close_and_read_stderr(self, timeout_s: float = 10.0) -> str:
        """Close stdin, wait for the end, and return what the process wrote to stderr."""
        async def _c() -> str:
            self._proc.stdin.write_eof()
            return _text(await asyncio.wait_for(self._proc.stderr.read(), timeout_s))
        try:
            return self.remote.hub.call(_c(), timeout_s + 2)
        except (asyncssh.Error, OSError, TimeoutError, SshError):
            return ""

    def close(self, timeout_s: float = 10.0) -> int | None:
        """Close stdin and wait ≤ ``timeout_s`` for the process to exit; its exit status, or None."""
        async def _c() -> int | None:
            self._proc.stdin.write_eof()
            await asyncio.wait_for(self._proc.wait_closed(), timeout_s)
            return self._proc.exit_status
        try:
            return self.remote.hub.call(_c(), timeout_s + 2)
        except (asyncssh.Error, OSError, TimeoutError, SshError):
            return None

    @property
    def alive(self) -> bool:
        """Whether the channel is still open."""
        return self._proc.exit_status is None and self._proc.exit_signal is None and not self._proc.is_closing()


def _text(b: object) -> str:
    if b is None:
        return ""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


def _signal_number(name: tuple | str | None) -> int:
    import signal
    sig = name[0] if isinstance(name, tuple) else name
    if not sig:
        return 0
    return int(getattr(signal, f"SIG{sig}", 0))


def offered_key(host: str, port: int, timeout_s: float = 15.0) -> asyncssh.SSHKey:
    """The host key ``host``:``port`` offers (read without authenticating).

    Raises: :class:`SshError` when it cannot be read.
    """
    async def _get() -> asyncssh.SSHKey | None:
        return await asyncio.wait_for(asyncssh.get_server_host_key(
            host, port, config=None, server_host_key_algs=list(HOST_KEY_ALGS)), timeout_s)
    try:
        key = asyncio.run(_get())
    except (OSError, asyncssh.Error, TimeoutError) as e:
        raise SshError(f"cannot read the host key of {host}:{port}: {type(e).__name__}: {e}") from None
    if key is None:
        raise SshError(f"{host}:{port} offered no host key")
    return key


def trust(inventory: Inventory, confirm: Callable[[Node, str], bool]) -> list[tuple[str, str, str]]:
    """Add the host key of each node not yet trusted to ``[ssh] known_hosts``, for each one ``confirm``
    approves (``onceproof ssh trust``: a ``y`` at a terminal). A node whose key is trusted is left alone; one
    whose known key differs is never replaced here (:class:`HostKeyError`: remove the old line by hand).

    Args:
        inventory: the nodes.
        confirm: ``(node, fingerprint) -> bool``, asked once per untrusted key.

    Returns: ``[(node name, fingerprint, "trusted" | "added" | "declined")]`` in inventory order.

    Raises: :class:`HostKeyError` (changed key), :class:`SshError` (a key that cannot be read).
    """
    path = inventory.ssh.known_hosts
    out: list[tuple[str, str, str]] = []
    for node in inventory.nodes:
        key = offered_key(node.host, node.port, inventory.ssh.connect_timeout_s)
        fp = key.get_fingerprint()
        known = _known_host_keys(path, node.host, node.port)
        if any(k.public_data == key.public_data for k in known):
            out.append((node.name, fp, "trusted"))
            continue
        if known:
            raise HostKeyError(f"[{node.name}] {node.host}:{node.port} offers {fp}, but {path} holds another "
                               "key for it; remove that line first if the machine was rebuilt",
                               node.name, fp, True)
        if not confirm(node, fp):
            out.append((node.name, fp, "declined"))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(known_hosts_line(node.host, node.port, key))
        out.append((node.name, fp, "added"))
    return out
