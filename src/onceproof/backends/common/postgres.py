"""A PostgreSQL server that a run starts for a sink that writes a table, in the run's directory.

The binaries are Debian's ``postgresql-15`` (``make setup`` installs it where no ``postgres`` is found;
the polyglot machine has it), looked up as :func:`find_bin` says. The server runs in the foreground as a
child of the harness (never ``pg_ctl start``, which detaches the postmaster from the process group and
from the parent-death signal), so the teardown, the parent-death signal and the reaper
(``backends/common/reaper.py``: ``ONCEPROOF_RUN`` is inherited) all reach it. PostgreSQL refuses to run
as root; as root it runs as the ``postgres`` user the Debian package creates, with its data in a
directory of its own under the system's temporary directory (a run directory under a 0700 parent, such
as pytest's, is out of that user's reach), removed at :meth:`PostgresServer.stop` (or by the run's
reaper when the harness dies first).

Settings (postgresql.org/docs/15/non-durability.html): ``fsync=off`` and ``full_page_writes=off`` are
safe against a crash of a server process, which is all a run does to it; ``synchronous_commit`` stays on,
so an acknowledged commit is never lost. TCP on 127.0.0.1 (a Unix socket path under the run directory can
pass the 107-byte limit), ``--auth=trust`` for the local user ``onceproof``.

Stop (postgresql.org/docs/15/server-shutdown.html): SIGINT, the fast shutdown (open transactions are
rolled back), then SIGKILL of the process group after :data:`STOP_GRACE_S`.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from onceproof.backends.common import processes, reaper

USER = "onceproof"
DATABASE = "onceproof"
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
SERVER_USER = "postgres"
"""The Unix user the server runs as when the harness is root (Debian's package creates it)."""
INSTALL_HINT = ("install PostgreSQL's server (Debian/Ubuntu: apt-get install -y postgresql-15; `make setup` "
                "does it) or point ONCEPROOF_PG_BIN at the directory holding initdb and postgres")


class PostgresError(RuntimeError):
    """The server cannot be found, initialised or started; the message names the fix or the log."""


def find_bin() -> Path:
    """The directory holding ``initdb`` and ``postgres``: ``$ONCEPROOF_PG_BIN``, else ``postgres`` on PATH,
    else the newest ``/usr/lib/postgresql/*/bin`` (Debian keeps the server off PATH).

    Raises: :class:`PostgresError` naming how to install it."""
    env = os.environ.get("ONCEPROOF_PG_BIN")
    cands = [Path(env)] if env else []
    on_path = shutil.which("postgres")
    if on_path:
        cands.append(Path(os.path.realpath(on_path)).parent)
    cands += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                      key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
                                      reverse=True)]
    for d in cands:
        if (d / "postgres").is_file() and (d / "initdb").is_file():
            return d
    raise PostgresError(f"no PostgreSQL server binaries found: {INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_and_create_database(port: int, timeout_s: float, exited) -> str:
    """Poll the server on ``127.0.0.1:port`` until it accepts a connection, then create :data:`DATABASE`
    when it is missing. ``exited()``: why the server is gone (``""`` while it runs), checked at each try.
    Returns ``""`` once the database exists, else why not (the server exited, or ``timeout_s`` s passed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gone = exited()
        if gone:
            return gone
        try:
            with psycopg.connect(f"host=127.0.0.1 port={port} dbname=postgres user={USER}",
                                 autocommit=True, connect_timeout=2) as c:
                if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
                    c.execute(f"CREATE DATABASE {DATABASE}")
            return ""
        except psycopg.OperationalError:
            time.sleep(0.2)
    return f"not accepting connections after {timeout_s:.0f} s"


@dataclass
class PostgresServer:
    """One server: data in ``data_dir`` (created; as root, a temporary directory the server's user owns,
    named in ``data_dir/where``), its log in ``log_path``. :meth:`start` initialises and starts it;
    :attr:`dsn` is the libpq connection string of its database; :meth:`stop` is bounded
    (≤ :data:`STOP_GRACE_S` + 5 s) and safe to call twice or before a start."""

    data_dir: Path
    log_path: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    _pgdata: Path | None = None

    @property
    def dsn(self) -> str:
        """``host=127.0.0.1 port=P dbname=onceproof user=onceproof`` (no password: trust on 127.0.0.1)."""
        return f"host=127.0.0.1 port={self.port} dbname={DATABASE} user={USER}"

    @property
    def job_dsn(self) -> str:
        """:attr:`dsn`: the pipeline runs on this host."""
        return self.dsn

    @property
    def _user(self) -> str | None:
        return SERVER_USER if os.geteuid() == 0 else None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """initdb (once), start the server and create the database; returns when it accepts connections.

        Raises: :class:`PostgresError` (no binaries, initdb failed, not up in ``timeout_s`` s: the message
        names the log)."""
        bin_dir = find_bin()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        user = self._user
        if user:
            self._pgdata = Path(tempfile.mkdtemp(prefix="onceproof-pg-"))
            reaper.note_scratch(self._pgdata)  # removed by the reaper if the harness dies before stop()
            shutil.chown(self._pgdata, user, user)
            (self.data_dir / "where").write_text(f"{self._pgdata}\n")
        else:
            self._pgdata = self.data_dir / "data"
            self._pgdata.mkdir(mode=0o700, exist_ok=True)
        if not (self._pgdata / "PG_VERSION").exists():
            init = subprocess.run([str(bin_dir / "initdb"), "-D", str(self._pgdata), "-U", USER, "--auth=trust",
                                   "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                                  capture_output=True, text=True, timeout=120, user=user,
                                  **({"group": user, "extra_groups": []} if user else {}))
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(init.stdout + init.stderr)
            if init.returncode:
                raise PostgresError(f"initdb failed (exit {init.returncode}); see {self.log_path}")
        last = ""
        for _ in range(3):  # a port taken between the probe and the bind: another one
            self.port = _free_port()
            self.proc = processes.spawn(
                [str(bin_dir / "postgres"), "-D", str(self._pgdata), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off",
                 "-c", "full_page_writes=off", "-c", "synchronous_commit=on",
                 "-c", "idle_in_transaction_session_timeout=120s"],
                log_path=self.log_path, user=user)
            last = self._wait_up(timeout_s)
            if not last:
                return
            self._stop_server()
        raise PostgresError(f"PostgreSQL did not start: {last}; see {self.log_path}")

    def _wait_up(self, timeout_s: float) -> str:
        """"" once the server accepts connections and the database exists, else why not."""
        def exited() -> str:
            return "" if self.proc is not None and self.proc.poll() is None else \
                f"the server exited ({self.proc.returncode if self.proc else '?'})"

        return wait_and_create_database(self.port, timeout_s, exited)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL of the group, then the temporary data directory (as root)
        removed; bounded, never raises."""
        self._stop_server()
        if self._user and self._pgdata is not None:
            shutil.rmtree(self._pgdata, ignore_errors=True)
            self._pgdata = None

    def _stop_server(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            os.kill(p.pid, signal.SIGINT)
            p.wait(timeout=STOP_GRACE_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        processes.kill_group(p.pid)  # what is left of the server and its backends
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
