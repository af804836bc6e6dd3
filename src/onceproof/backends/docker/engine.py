"""A Docker engine that answers: the one already running, or a ``dockerd`` this module starts and stops.

:func:`ensure_engine` (a context manager) and :class:`DockerEngine` first ask the engine named by
``DOCKER_HOST`` (default ``unix:///var/run/docker.sock``) for ``/_ping`` through the docker SDK. When it
answers, that engine is used and never stopped. When nothing answers, nothing is installed: the
``dockerd`` that the project's set-up installed (``make docker-images`` → Debian's ``docker.io``) is
started in the background, in its own session, with everything it writes under
:func:`engine_dir` (``$ONCEPROOF_CACHE/docker``, default ``~/.cache/onceproof/docker``):

===================  ========================================================================
``data/``            ``--data-root``: images, containers, volumes, the managed containerd's root
``run/``             ``--exec-root``: the managed containerd's socket and state
``dockerd.pid``      ``--pidfile``
``dockerd.log``      the daemon's stdout and stderr (appended to)
``engine.json``      who started it: pid, start time, host, paths (read by :func:`stop_started`)
===================  ========================================================================

It listens on the socket of ``DOCKER_HOST`` (so the ``docker`` CLI, Compose and testcontainers find it
with no extra setting), and :meth:`DockerEngine.stop` / :func:`stop_started` stop **only** a daemon this
module started (pid, start time and ``--data-root`` must all match), within a bounded time.

Priority: the daemon is started with ``nice 19`` and the idle I/O class by default
(``ONCEPROOF_DOCKERD_NICE`` or ``nice=`` change it; ``0`` gives the normal class). Every container and
every image-build step inherits the daemon's priority (dockerd → containerd → shim → runc → the
container's processes), so a niced daemon keeps image builds from taking CPU or disk from a test or a
soak that shares the machine — the situation onceproof runs in (two cores, CI next to soaks). A
backend that measures the cluster's own timing under load can start the engine with ``nice=0``, or
renice its containers (``State.Pid`` of ``docker inspect``).

Starting ``dockerd`` needs root (rootless Docker is set up with ``dockerd-rootless-setuptool.sh`` and
then answers on its own ``DOCKER_HOST``, which this module uses like any other engine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

import docker
from onceproof.backends.cache import cache_dir

DEFAULT_HOST = "unix:///var/run/docker.sock"
"""The engine's usual socket, and the one a started ``dockerd`` listens on when ``DOCKER_HOST`` is unset."""
NICE_ENV = "ONCEPROOF_DOCKERD_NICE"
DEFAULT_NICE = 19


class EngineError(RuntimeError):
    """No engine answers and none could be started (no ``dockerd``, not root, a non-local ``DOCKER_HOST``,
    the daemon exited or did not answer in time), or a started daemon did not stop in time. The message
    names the fix and, for a daemon this module started, the tail of its log."""


def engine_dir() -> Path:
    """``$ONCEPROOF_CACHE/docker`` (default ``~/.cache/onceproof/docker``): the started daemon's files."""
    return cache_dir() / "docker"


def docker_host() -> str:
    """``$DOCKER_HOST``, or :data:`DEFAULT_HOST` when unset or empty."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def ping(host: str | None = None, timeout_s: float = 5.0) -> docker.DockerClient | None:
    """A client of the engine at ``host`` (default :func:`docker_host`) if it answers ``/_ping`` within
    ``timeout_s`` seconds, else ``None``. Never raises for an absent or dead engine."""
    host = host or docker_host()
    try:
        client = docker.DockerClient(base_url=host, version="auto", timeout=max(1, int(timeout_s)))
    except docker.errors.DockerException:
        return None  # the version probe itself failed: nothing answers
    try:
        if client.ping():
            return client
    except Exception:  # noqa: BLE001 - requests' ConnectionError, APIError, a half-started daemon
        pass
    client.close()
    return None


def _nice_default() -> int:
    raw = os.environ.get(NICE_ENV, "").strip()
    if not raw:
        return DEFAULT_NICE
    try:
        return max(0, min(19, int(raw)))
    except ValueError:
        raise EngineError(f"{NICE_ENV}={raw!r} is not an integer 0..19; unset it or set e.g. 19") from None


def priority_prefix(nice: int, current: int, *, ionice: bool = True) -> list[str]:
    """The command prefix that starts a program at niceness ``nice`` (absolute, 0..19) from a process
    running at ``current``: ``nice -n <nice - current>`` (an increment; root may lower it) when they
    differ, then ``ionice -c3`` (idle I/O) when ``nice`` > 0, else ``ionice -c2 -n4`` (the normal
    best-effort class, so that a niced caller's idle class is not inherited). ``ionice=False`` when
    util-linux's ``ionice`` is missing."""
    out = ["nice", "-n", str(nice - current)] if nice != current else []
    if ionice:
        out += ["ionice", "-c3"] if nice > 0 else ["ionice", "-c2", "-n4"]
    return out


def _proc_matches(pid: int, create_time: float, data_root: str) -> psutil.Process | None:
    """The process ``pid`` if it is the dockerd we recorded (same start time, our ``--data-root``)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > 1.0 or p.status() == psutil.STATUS_ZOMBIE:
            return None
        cmd = p.cmdline()
    except psutil.Error:
        return None
    if not any(os.path.basename(a) == "dockerd" for a in cmd):
        return None
    return p if f"--data-root={data_root}" in cmd else None


def _ours(root: Path) -> list[psutil.Process]:
    """Processes whose command line names our exec- or data-root: the managed containerd and its shims
    (shims re-parent to init, so they are found by their ``-address <exec-root>/...`` argument)."""
    marks = (str(root / "run"), str(root / "data"))
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if p.pid != os.getpid() and any(m in cmd for m in marks):
            out.append(p)
    return out


def _tail(path: Path, nbytes: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - nbytes))
            return f.read().decode(errors="replace")
    except OSError:
        return "(no log)"


class DockerEngine:
    """An engine that answers: the running one, or a ``dockerd`` started by :meth:`start`.

    Args:
        host: the engine's address (``unix:///path`` or ``tcp://host:port``); default :func:`docker_host`.
            Only a ``unix://`` address can be served by a daemon started here.
        root: directory of the started daemon's files (default :func:`engine_dir`).
        nice: niceness 0..19 of a started daemon and everything it runs, absolute (not an increment on
            the caller's; default ``$ONCEPROOF_DOCKERD_NICE`` or 19); above 0 the daemon also gets the
            idle I/O class (``ionice -c3``), at 0 the normal best-effort class.
        start_timeout_s: seconds to wait for a started daemon to answer.
        stop_timeout_s: seconds :meth:`stop` waits after SIGTERM before SIGKILL.
        dockerd: the daemon binary (default ``dockerd`` on ``PATH``, then ``/usr/sbin/dockerd``).

    Attributes:
        started: True when this object started the daemon (and so :meth:`stop` will stop it).
        pid: the started daemon's pid, or ``None``.

    Use ``with DockerEngine() as eng: eng.client.images.list()``, or :meth:`start` / :meth:`stop`.
    """

    def __init__(self, host: str | None = None, *, root: Path | None = None, nice: int | None = None,
                 start_timeout_s: float = 60.0, stop_timeout_s: float = 30.0, dockerd: str | None = None):
        self.host = host or docker_host()
        self.root = Path(root) if root is not None else engine_dir()
        self.nice = _nice_default() if nice is None else max(0, min(19, int(nice)))
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.dockerd = dockerd
        self.started = False
        self.pid: int | None = None
        self._create_time = 0.0
        self._client: docker.DockerClient | None = None

    # -- paths

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    @property
    def exec_root(self) -> Path:
        return self.root / "run"

    @property
    def pidfile(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    @property
    def state_file(self) -> Path:
        return self.root / "engine.json"

    # -- use

    @property
    def client(self) -> docker.DockerClient:
        """The docker SDK client. Raises ``EngineError`` before :meth:`start`."""
        if self._client is None:
            raise EngineError("engine not started: call DockerEngine().start() or use `with DockerEngine() as eng:`")
        return self._client

    def env(self) -> dict[str, str]:
        """``{"DOCKER_HOST": host}`` for a subprocess (``docker``, ``docker compose``) to reach this engine."""
        return {"DOCKER_HOST": self.host}

    def start(self) -> DockerEngine:
        """Make sure an engine answers at :attr:`host`; start ``dockerd`` when none does. Returns ``self``.

        Waits at most ``start_timeout_s`` seconds for a started daemon (its first start on an empty
        data-root takes a few seconds). A daemon started by an earlier :class:`DockerEngine` (recorded in
        ``engine.json``) that is still alive but not yet answering is waited for, not started twice.

        Raises: ``EngineError`` naming the fix: ``dockerd`` not installed (``make docker-images``
        installs Debian's ``docker.io``), not root, a ``DOCKER_HOST`` this machine cannot serve, the
        daemon exited (its log tail is in the message) or did not answer in time (it is then stopped).
        """
        if self._client is not None:
            return self
        client = ping(self.host)
        if client is not None:
            self._client = client
            return self
        if not self.host.startswith("unix://"):
            raise EngineError(f"no Docker engine answers at DOCKER_HOST={self.host}: start that engine, or unset "
                              f"DOCKER_HOST to let onceproof start a local dockerd on {DEFAULT_HOST}")
        recorded = self._recorded()
        if recorded is not None:  # ours from an earlier call, still starting (or hung)
            self._wait(recorded, started=False)
            return self
        if os.geteuid() != 0:
            raise EngineError(f"no Docker engine answers at {self.host} and starting dockerd needs root: start it "
                              "(`sudo systemctl start docker`, or `sudo dockerd &`), or set up rootless Docker "
                              "(dockerd-rootless-setuptool.sh install) and export the DOCKER_HOST it prints")
        binary = self.dockerd or shutil.which("dockerd") or ("/usr/sbin/dockerd" if os.path.exists("/usr/sbin/dockerd")
                                                               else None)
        if binary is None or not os.path.exists(binary):
            raise EngineError(f"no Docker engine answers at {self.host} and `dockerd` is not installed"
                              f"{f' ({binary} does not exist)' if binary else ''}: run `make docker-images` "
                              "(installs Debian's docker.io and debootstrap) or `apt-get install docker.io`")
        self._launch(binary)
        return self

    def _recorded(self) -> psutil.Process | None:
        try:
            st = json.loads(self.state_file.read_text())
            return _proc_matches(int(st["pid"]), float(st["create_time"]), str(self.data_root))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _launch(self, binary: str) -> None:
        sock = self.host[len("unix://"):]
        for d in (self.data_root, self.exec_root, Path(sock).parent):
            d.mkdir(parents=True, exist_ok=True)
        cmd = [binary, f"--data-root={self.data_root}", f"--exec-root={self.exec_root}",
               f"--pidfile={self.pidfile}", f"--host={self.host}",
               "--shutdown-timeout=10"]  # seconds each container gets on daemon shutdown (default 15)
        prefix = priority_prefix(self.nice, os.nice(0), ionice=shutil.which("ionice") is not None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} onceproof starts: {' '.join(prefix + cmd)}\n"
                      .encode())
            log.flush()
            # nice/ionice exec into dockerd, so the pid is dockerd's own
            proc = subprocess.Popen(prefix + cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        self.started = True
        self.pid = proc.pid
        self._popen = proc
        deadline = time.monotonic() + 5.0
        while True:  # the pid's cmdline becomes dockerd's once nice and ionice have exec'ed
            try:
                p = psutil.Process(proc.pid)
                if any(os.path.basename(a) == "dockerd" for a in p.cmdline()) or proc.poll() is not None \
                        or time.monotonic() > deadline:
                    break
            except psutil.Error:
                break
            time.sleep(0.02)
        try:
            self._create_time = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            self._create_time = time.time()
        self.state_file.write_text(json.dumps({
            "pid": proc.pid, "create_time": self._create_time, "host": self.host, "nice": self.nice,
            "data_root": str(self.data_root), "exec_root": str(self.exec_root), "log": str(self.log_path),
            "started_by": os.getpid(), "started_at": time.time()}, indent=2))
        try:
            self._wait(psutil.Process(proc.pid), started=True)
        except psutil.Error:
            self._fail_start("exited at once")

    def _wait(self, proc: psutil.Process, *, started: bool) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if started and self._popen.poll() is not None:
                self._fail_start(f"exited with code {self._popen.returncode}")
            if not started and not proc.is_running():
                raise EngineError(f"the dockerd recorded in {self.state_file} exited while starting; "
                                  f"see {self.log_path}:\n{_tail(self.log_path)}")
            client = ping(self.host, timeout_s=2.0)
            if client is not None:
                self._client = client
                return
            time.sleep(0.2)
        if started:
            self._fail_start(f"did not answer at {self.host} within {self.start_timeout_s:.0f}s")
        raise EngineError(f"the dockerd (pid {proc.pid}) recorded in {self.state_file} does not answer at "
                          f"{self.host} within {self.start_timeout_s:.0f}s; stop it with "
                          f"`python -m onceproof.backends.docker.engine stop` and retry; log: {self.log_path}")

    def _fail_start(self, why: str) -> None:
        log_tail = _tail(self.log_path)
        try:
            self.stop()
        finally:
            raise EngineError(f"dockerd {why}; see {self.log_path}:\n{log_tail}\n"
                              "Common causes: another dockerd holds the socket or the data-root; no overlay2 or "
                              "iptables support in this kernel (try `dockerd --storage-driver=vfs --iptables=false` "
                              "by hand to narrow it down)")

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the daemon if (and only if) this object started it: SIGTERM, wait up to ``timeout_s``
        seconds (default ``stop_timeout_s``; dockerd stops its containers, 10 s each at most, then its
        containerd), then SIGKILL it and whatever of its containerd and shims is left. An engine that
        was already running is left alone. Safe to call twice.

        Returns: True when a daemon was stopped.

        Raises: ``EngineError`` when processes are still alive 10 s after SIGKILL (cannot happen short of
        a hung kernel; the message lists their pids).
        """
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
        if not self.started or self.pid is None:
            return False
        pid, self.pid, self.started = self.pid, None, False
        ok = _terminate(pid, self._create_time, self.root, self.stop_timeout_s if timeout_s is None else timeout_s)
        with contextlib.suppress(Exception):
            self._popen.wait(timeout=1)  # reap
        self.state_file.unlink(missing_ok=True)
        return ok

    def __enter__(self) -> DockerEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(pid: int, create_time: float, root: Path, timeout_s: float) -> bool:
    """SIGTERM dockerd ``pid`` (verified as ours), wait ``timeout_s`` s, then SIGKILL it and the managed
    containerd and shims found under ``root``. Returns True when the daemon was ours and is gone."""
    proc = _proc_matches(pid, create_time, str(root / "data"))
    if proc is None:
        return False
    helpers = _ours(root)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=max(0.0, timeout_s))
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    # dockerd stops its containerd on a clean exit; on SIGKILL containerd and the shims stay: ours by path
    left = [p for p in {*helpers, *_ours(root)} if p.pid != pid]
    gone, alive = psutil.wait_procs(left, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    gone, alive = psutil.wait_procs([*alive, proc], timeout=10)
    if alive:
        raise EngineError(f"processes {[p.pid for p in alive]} of the dockerd under {root} survive SIGKILL")
    data = root / "data"
    if os.path.ismount(data):  # dockerd mounts its data-root privately; a killed one leaves the mount
        subprocess.run(["umount", "-l", str(data)], capture_output=True, check=False)
    return True


def stop_started(root: Path | None = None, timeout_s: float = 30.0) -> bool:
    """Stop the dockerd recorded in ``<root>/engine.json`` (default :func:`engine_dir`) — one that this
    module started, possibly from another process — and nothing else: pid, start time and
    ``--data-root`` must match. Returns True when a daemon was stopped, False when none of ours runs.

    Raises: ``EngineError`` as :meth:`DockerEngine.stop`.
    """
    root = Path(root) if root is not None else engine_dir()
    state = root / "engine.json"
    try:
        st = json.loads(state.read_text())
        pid, ct = int(st["pid"]), float(st["create_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    ok = _terminate(pid, ct, root, timeout_s)
    state.unlink(missing_ok=True)
    return ok


def status(root: Path | None = None) -> dict:
    """What answers and who started it: ``{"host", "answers", "server_version", "started_here": {pid, ...}
    or None}`` (``started_here`` is the live dockerd recorded in ``engine.json``)."""
    root = Path(root) if root is not None else engine_dir()
    client = ping()
    out: dict = {"host": docker_host(), "answers": client is not None, "server_version": None, "started_here": None}
    if client is not None:
        with contextlib.suppress(Exception):
            out["server_version"] = client.version().get("Version")
        client.close()
    try:
        st = json.loads((root / "engine.json").read_text())
        if _proc_matches(int(st["pid"]), float(st["create_time"]), str(root / "data")) is not None:
            out["started_here"] = st
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return out


@contextlib.contextmanager
def ensure_engine(**kwargs) -> Iterator[DockerEngine]:
    """``with ensure_engine() as eng:`` — an answering engine for the block; a daemon started for it is
    stopped at the end, a running one is left alone. Keyword arguments go to :class:`DockerEngine`.

    Raises: ``EngineError`` (see :meth:`DockerEngine.start`).
    """
    eng = DockerEngine(**kwargs).start()
    try:
        yield eng
    finally:
        eng.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m onceproof.backends.docker.engine start|stop|status``: start (and leave running), stop the one we
    started, or print the status as JSON."""
    ap = argparse.ArgumentParser(prog="python -m onceproof.backends.docker.engine", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("start", "stop", "status"))
    ap.add_argument("--nice", type=int, default=None, help=f"niceness of a started dockerd (default ${NICE_ENV} or 19)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for start / stop")
    a = ap.parse_args(argv)
    try:
        if a.action == "start":
            eng = DockerEngine(nice=a.nice, start_timeout_s=a.timeout).start()
            v = eng.client.version()
            print(json.dumps({"host": eng.host, "started": eng.started, "pid": eng.pid,
                              "server_version": v.get("Version"), "data_root": str(eng.data_root) if eng.started
                              else None}))
        elif a.action == "stop":
            print("stopped" if stop_started(timeout_s=a.timeout) else "no dockerd started by onceproof is running")
        else:
            print(json.dumps(status(), indent=2))
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
