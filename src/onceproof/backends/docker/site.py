"""One run's place in the Docker engine: its bridge network and its containers, found by label.

Every container and the network carry ``org.onceproof.run=<run id>`` (and ``org.onceproof.role``), so
whatever process asks — the run itself, ``onceproof cluster status|down``, the reaper
(:mod:`onceproof.backends.docker.reaper`) after a harness was SIGKILLed — finds and removes exactly that run's
resources, and nothing else. A container may also name a host file (``org.onceproof.log``) that
receives its ``docker logs`` when it is removed.

Containers are created with testcontainers' ``DockerContainer`` (its labels and image handling) and
driven with the docker SDK. Ryuk, testcontainers' own reaper, needs its image from a registry; when
the engine does not have it, it is turned off (``TESTCONTAINERS_RYUK_DISABLED``), and the reaper of
this package does its job.

Every call is bounded: the SDK client times out after ``API_TIMEOUT_S`` seconds, and :meth:`sweep`
removes containers in parallel.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

from docker.types import EndpointConfig, IPAMConfig, IPAMPool
from testcontainers.core.config import testcontainers_config as tc
from testcontainers.core.container import DockerContainer

import docker
from onceproof.backends.base import BackendError
from onceproof.backends.common import reaper
from onceproof.backends.docker.engine import DockerEngine, EngineError
from onceproof.backends.docker.layout import DockerLayout, subnet_candidates

log = logging.getLogger("onceproof.docker")

LABEL_RUN = "org.onceproof.run"
LABEL_ROLE = "org.onceproof.role"
LABEL_LOG = "org.onceproof.log"
LABEL_BACKEND = "org.onceproof.backend"
API_TIMEOUT_S = 30


def engine_client() -> docker.DockerClient:
    """A docker SDK client of the engine that answers (``backends/docker/engine.py``: the running one, or
    a niced ``dockerd`` it starts when root). Turns Ryuk off when its image is absent.

    Raises: ``BackendError`` naming the fix when no engine answers.
    """
    try:
        eng = DockerEngine().start()
    except EngineError as e:
        raise BackendError(f"the docker backend needs a Docker engine: {e}") from e
    _ryuk_off_without_image(eng.client)
    return docker.DockerClient(base_url=eng.host, version="auto", timeout=API_TIMEOUT_S)


def _ryuk_off_without_image(client: docker.DockerClient) -> None:
    if os.environ.get("TESTCONTAINERS_RYUK_DISABLED"):
        return
    try:
        client.images.get(tc.ryuk_image)
    except docker.errors.ImageNotFound:
        os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
        tc.ryuk_disabled = True
    except docker.errors.APIError:
        pass


def start_reaper(run_id: str) -> subprocess.Popen:
    """Start the reaper of run ``run_id`` (:mod:`onceproof.backends.docker.reaper`), watching this
    process. Returns its ``Popen``."""
    return reaper.start_watcher("onceproof.backends.docker.reaper", ["--run", run_id])


def stop_reaper(proc: subprocess.Popen | None) -> None:
    """Stop a reaper started by :func:`start_reaper` (its job is done) and reap it; ≤ 10 s."""
    reaper.stop_watcher(proc)


class DockerSite:
    """The network and containers of run ``layout.run_id`` in the engine of ``client``.

    ``reap``: before the first resource is created, start a reaper (:mod:`onceproof.backends.docker.reaper`) that
    removes them all if this process dies without :meth:`sweep`; :meth:`sweep` stops it. Off for a
    cluster meant to outlive this process (``onceproof cluster up``).
    """

    def __init__(self, client: docker.DockerClient, layout: DockerLayout, *, reap: bool = False):
        self.client = client
        self.layout = layout
        self.reap = reap
        self._reaper = None

    @property
    def run_id(self) -> str:
        return self.layout.run_id

    def labels(self, role: str, log_path: Path | None = None) -> dict[str, str]:
        out = {LABEL_BACKEND: "docker", LABEL_RUN: self.run_id, LABEL_ROLE: role}
        if log_path is not None:
            out[LABEL_LOG] = str(log_path)
        return out

    # ------------------------------------------------------------------ network
    def network(self):
        """The run's network (``None`` when it does not exist)."""
        nets = self.client.networks.list(filters={"label": f"{LABEL_RUN}={self.run_id}"})
        return nets[0] if nets else None

    def ensure_network(self) -> DockerLayout:
        """Create the run's bridge network unless it exists, on the first free subnet of
        :func:`subnet_candidates` (the layout's addresses follow it). Returns the layout in use.

        Raises: ``BackendError`` when every candidate subnet overlaps another network.
        """
        if self.reap and self._reaper is None:
            self._reaper = start_reaper(self.run_id)
        net = self.network()
        if net is not None:
            subnet = net.attrs["IPAM"]["Config"][0]["Subnet"]
            self.layout = _with_subnet(self.layout, subnet)
            return self.layout
        last = ""
        for subnet in subnet_candidates(int(self.run_id[:4], 16)):
            lay = _with_subnet(self.layout, subnet)
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=subnet, iprange=lay.ip_range, gateway=lay.gateway)])
            try:
                self.client.networks.create(lay.network, driver="bridge", ipam=ipam, check_duplicate=True,
                                            labels=self.labels("network"))
            except docker.errors.APIError as e:
                last = str(e)
                if "overlap" in last.lower():
                    continue
                raise BackendError(f"creating the docker network {lay.network} failed: {e}") from e
            self.layout = lay
            return lay
        raise BackendError(f"no free subnet for the docker network ({last}); remove unused networks "
                           "(`docker network prune`)")

    # ------------------------------------------------------------------ containers
    def run(self, role: str, image: str, *, ip: str | None, aliases: list[str], env: dict[str, str],
            command: list[str] | None = None, ports: dict | None = None, volumes: dict | None = None,
            log_path: Path | None = None, pid_host: bool = False, hostname: str | None = None,
            working_dir: str | None = None):
        """Create and start container ``layout.container(role)`` from ``image`` on the run's network with
        address ``ip`` (``None``: the engine's pick) and ``aliases``. ``ports``: ``{"9091/tcp":
        ("127.0.0.1", 19091)}``; ``volumes``: ``{host path: {"bind": path, "mode": "rw"|"ro"}}``;
        ``pid_host``: share the host's pid namespace (its processes' pids are host pids). Returns the
        docker SDK ``Container``.

        Raises: ``BackendError`` naming the image to build when it is missing; ``docker.errors.APIError``.
        """
        self.ensure_network()
        name = self.layout.container(role)
        kwargs = {"labels": self.labels(role, log_path), "network": self.layout.network,
                  "networking_config": {self.layout.network: EndpointConfig(
                      self.client.api.api_version, aliases=aliases, ipv4_address=ip)},
                  "hostname": hostname or (aliases[0] if aliases else None)}
        if pid_host:
            kwargs["pid_mode"] = "host"
        if working_dir:
            kwargs["working_dir"] = working_dir
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            raise BackendError(f"image {image} is missing: build it with `make docker-images` "
                               "(or `onceproof deps --backend docker`)") from None
        c = DockerContainer(image, command=command, env=env, name=name,
                            docker_client_kw={"timeout": API_TIMEOUT_S}).with_kwargs(**kwargs)
        c.ports = dict(ports or {})  # with_bind_ports would drop the host address (127.0.0.1)
        for host, m in (volumes or {}).items():
            c.with_volume_mapping(host, m["bind"], m.get("mode", "rw"))
        c.start()
        return self.client.containers.get(c.get_wrapped_container().id)

    def containers(self, role: str | None = None) -> list:
        """The run's containers (any state), or only those of ``role``."""
        label = [f"{LABEL_RUN}={self.run_id}"] + ([f"{LABEL_ROLE}={role}"] if role else [])
        return self.client.containers.list(all=True, filters={"label": label})

    def get(self, role: str):
        """The container of ``role``, or ``None``."""
        found = self.containers(role)
        return found[0] if found else None

    def remove(self, container, grace_s: float = 0.0) -> None:
        """Stop ``container`` (SIGTERM, SIGKILL after ``grace_s`` s; at once when 0), write its logs to
        the file its ``org.onceproof.log`` label names, and remove it. Never raises for a container
        that is already gone."""
        with contextlib.suppress(docker.errors.NotFound):
            container.reload()
            if container.status == "paused":
                with contextlib.suppress(docker.errors.APIError):
                    container.unpause()
            if grace_s > 0 and container.status == "running":
                with contextlib.suppress(docker.errors.APIError):
                    container.stop(timeout=int(grace_s))
            save_logs(container)
            container.remove(force=True, v=True)

    def sweep(self, timeout_s: float = 45.0) -> list[str]:
        """Remove every container of the run (in parallel, logs saved) and then its network, within
        ``timeout_s`` seconds; then stop the reaper. Returns what could not be removed (empty when
        everything is gone)."""
        left = self._sweep(timeout_s)
        if not left and self._reaper is not None:
            stop_reaper(self._reaper)
            self._reaper = None
        return left

    def _sweep(self, timeout_s: float) -> list[str]:
        left = []
        cs = self.containers()
        if cs:
            pool = ThreadPoolExecutor(max_workers=min(8, len(cs)), thread_name_prefix="docker-remove")
            futs = {pool.submit(self.remove, c): c for c in cs}
            done, pending = wait(futs, timeout=timeout_s)
            pool.shutdown(wait=False)  # the bound holds even if the engine hangs on one container
            for f in done:
                if f.exception() is not None:
                    left.append(f"{futs[f].name}: {f.exception()!r}")
            left += [f"{futs[f].name}: still being removed after {timeout_s:.0f}s" for f in pending]
        net = self.network()
        if net is not None:
            for attempt in range(10):  # an endpoint can linger a moment after its container went
                try:
                    net.remove()
                    break
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError as e:
                    if attempt == 9:
                        left.append(f"network {net.name}: {e}")
                    time.sleep(0.5)
        return left


def save_logs(container) -> Path | None:
    """Write ``container``'s logs (stdout and stderr, as ``docker logs`` shows them) to the file its
    ``org.onceproof.log`` label names; returns that path, ``None`` when it names none or there are no
    logs. Never raises."""
    path = (container.labels or {}).get(LABEL_LOG)
    if not path:
        return None
    try:
        data = container.logs(stdout=True, stderr=True)
    except docker.errors.APIError:
        return None
    if not data:
        return None
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    except OSError as e:
        log.warning("could not save the logs of %s to %s: %s", container.name, p, e)
        return None
    return p


def _with_subnet(layout: DockerLayout, subnet: str) -> DockerLayout:
    return replace(layout, subnet=subnet)
