"""The Docker backend's PostgreSQL server: one ``onceproof/postgres`` container on the run's network.

The image (``docker/postgres``) is Debian's ``postgresql-15`` with the local backend's settings
(``backends/common/postgres.py``: ``fsync=off``, ``full_page_writes=off``, ``synchronous_commit=on``);
its entrypoint initialises a cluster for the user ``onceproof`` with trust on the run's subnet and runs
the postmaster as the container's main process. Two addresses, as for the brokers
(``backends/docker/layout.py``):

* :attr:`DockerPostgres.dsn`: ``127.0.0.1:<host port>``, the container's 5432 published on the host's
  loopback only, for the harness's reader;
* :attr:`DockerPostgres.job_dsn`: ``postgres:5432`` (a fixed address and alias on the run's network), for
  the driver and executors, which run in containers.

Stop: ``docker stop`` with :data:`~onceproof.backends.common.postgres.STOP_GRACE_S` (SIGTERM, PostgreSQL's
smart shutdown, then SIGKILL), the container's output written to the log file first, and the container
removed; the run's label lets the reaper (``backends/docker/reaper.py``) remove it when the harness dies.
"""

from __future__ import annotations

from pathlib import Path

from onceproof.backends.base import BackendError
from onceproof.backends.common.postgres import DATABASE, START_TIMEOUT_S, STOP_GRACE_S, USER, wait_and_create_database
from onceproof.backends.docker.layout import DATABASE_HOST, DATABASE_PORT
from onceproof.backends.docker.site import DockerSite

ROLE = "postgres"


class DockerPostgres:
    """A PostgreSQL container of ``image`` on ``site``'s network, its output in ``log_path``. Implements
    ``backends.base.Database``: :meth:`start` returns when the database exists; :meth:`stop` is bounded
    (≤ :data:`STOP_GRACE_S` + the engine's timeout) and safe twice or before a start."""

    def __init__(self, site: DockerSite, image: str, log_path: Path):
        self.site, self.image, self.log_path = site, image, log_path
        self.port = 0
        self._container = None

    @property
    def dsn(self) -> str:
        """``host=127.0.0.1 port=<published> dbname=onceproof user=onceproof``: the harness's."""
        return f"host=127.0.0.1 port={self.port} dbname={DATABASE} user={USER}"

    @property
    def job_dsn(self) -> str:
        """``host=postgres port=5432 dbname=onceproof user=onceproof``: the pipeline's containers'."""
        return f"host={DATABASE_HOST} port={DATABASE_PORT} dbname={DATABASE} user={USER}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Run the container and create the database.

        Raises: ``BackendError`` when the image is missing (naming ``make docker-images``) or the server does
        not accept connections within ``timeout_s`` s (with the container's last lines)."""
        lay = self.site.ensure_network()  # the network's subnet decides the address
        self._container = c = self.site.run(
            ROLE, self.image, ip=lay.database_ip, aliases=[DATABASE_HOST], env={},
            ports={f"{DATABASE_PORT}/tcp": ("127.0.0.1",)}, log_path=self.log_path)
        c.reload()
        self.port = int(c.attrs["NetworkSettings"]["Ports"][f"{DATABASE_PORT}/tcp"][0]["HostPort"])

        def exited() -> str:
            c.reload()
            return "" if c.status in ("created", "running") else f"the container is {c.status}"

        why = wait_and_create_database(self.port, timeout_s, exited)
        if why:
            tail = c.logs(tail=20).decode(errors="replace")
            raise BackendError(f"PostgreSQL ({self.image}) did not start: {why}; its last lines:\n{tail}")

    def stop(self) -> None:
        """Stop and remove the container, its output written to :attr:`log_path`; safe twice or before
        :meth:`start`."""
        c, self._container = self._container, None
        if c is not None:
            self.site.remove(c, grace_s=STOP_GRACE_S)
