"""The cluster's network under faults, on Docker: the Docker backend's :class:`onceproof.backends.base.FaultNetwork`.

Two mechanisms, one per kind of fault:

* **Partitions of a whole node** — path ``node-<i>`` — are ``docker network disconnect`` / ``connect``
  of broker ``i``'s container: its only network interface goes, so *everything* into and out of it
  stops (clients, peers' fetches from it, its own replica fetches from other leaders, its quorum links),
  and new connections fail (its name no longer resolves). Reconnected with the same address and alias.
  This lifts the local backend's limit (``backends/local/faultproxy.py``: there, isolating a broker
  leaves its outbound replica fetches running).
* **Per-path cuts and slow links** go through a toxiproxy container (``onceproof/toxiproxy``, alias
  ``toxiproxy`` on the run's network) that the brokers advertise (``backends/docker/layout.py``):

  * ``client-<i>`` – host clients → broker ``i`` (published on 127.0.0.1);
  * ``app-<i>``    – clients inside the network (the Spark driver and executors) → broker ``i``;
  * ``internal-<i>`` – other brokers' replica fetchers → broker ``i``.

  A cut disables the proxy; a slowdown is a toxic (latency, bandwidth, slicer), as on the local backend.

The toxiproxy API is published on an ephemeral 127.0.0.1 port. Traffic never leaves the machine.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import docker
from onceproof.backends.base import BackendError
from onceproof.backends.common.toxiproxy import ToxiproxyClient, ToxiproxyError
from onceproof.backends.docker.layout import APP_PORT, CLIENT_PORT, INTERNAL_PORT, PROXY_API_PORT, PROXY_HOST
from onceproof.backends.docker.site import DockerSite

NODE = "node-"


def proxy_specs(site_nodes: int, layout) -> list[tuple[str, str, str]]:
    """``(name, listen, upstream)`` of every proxy: ``client-``, ``app-`` and ``internal-<i>``."""
    out = []
    for n in range(1, site_nodes + 1):
        h = layout.broker_host(n)
        out += [(f"client-{n}", f"0.0.0.0:{layout.proxy_client_port(n)}", f"{h}:{CLIENT_PORT}"),
                (f"app-{n}", f"0.0.0.0:{layout.proxy_app_port(n)}", f"{h}:{APP_PORT}"),
                (f"internal-{n}", f"0.0.0.0:{layout.proxy_internal_port(n)}", f"{h}:{INTERNAL_PORT}")]
    return out


class DockerFaultNetwork:
    """The fault network of the cluster on ``site``: toxiproxy's container and the brokers' network
    attachments. Start it before the cluster (the brokers advertise the proxies). Toxiproxy's logs go
    to ``log_path`` when it is removed."""

    def __init__(self, site: DockerSite, image: str, log_path: Path):
        self.site = site
        self.image = image
        self.log_path = log_path
        self._api: ToxiproxyClient | None = None

    @property
    def layout(self):
        return self.site.layout

    def start(self) -> None:
        """Create the network (if needed), start toxiproxy and create every proxy.

        Raises: ``BackendError`` when toxiproxy does not answer within 30 s (its log tail included).
        """
        lay = self.site.ensure_network()
        ports = {f"{PROXY_API_PORT}/tcp": ("127.0.0.1",)}
        for n in range(1, lay.nodes + 1):
            ports[f"{lay.proxy_client_port(n)}/tcp"] = ("127.0.0.1", lay.proxy_client_port(n))
        c = self.site.run("toxiproxy", self.image, ip=lay.proxy_ip, aliases=[PROXY_HOST], env={}, ports=ports,
                          log_path=self.log_path)
        c.reload()
        port = int(c.attrs["NetworkSettings"]["Ports"][f"{PROXY_API_PORT}/tcp"][0]["HostPort"])
        api = ToxiproxyClient(f"http://127.0.0.1:{port}", timeout_s=10.0)
        deadline = time.monotonic() + 30
        while True:
            try:
                api.version()
                break
            except ToxiproxyError as e:
                if time.monotonic() > deadline:
                    tail = c.logs(tail=20).decode(errors="replace")
                    raise BackendError(f"toxiproxy ({self.image}) did not answer at {api.url}: {e}\n{tail}") from e
                time.sleep(0.2)
        for name, listen, upstream in proxy_specs(lay.nodes, lay):
            api.create_proxy(name, listen, upstream)
        self._api = api

    @property
    def api(self) -> ToxiproxyClient:
        if self._api is None:
            raise BackendError("the fault network is not started: call start() first")
        return self._api

    def describe(self) -> str:
        return (f"docker network {self.layout.network} ({self.layout.subnet}) + toxiproxy container, "
                f"{len(proxy_specs(self.layout.nodes, self.layout))} proxies at {self.api.url}")

    # ------------------------------------------------------------------ paths
    def client_paths(self, node: int) -> list[str]:
        """Every client → ``node``: host clients and the pipeline's (in the network)."""
        return [f"client-{node}", f"app-{node}"]

    def isolation_paths(self, node: int) -> list[str]:
        """``node-<i>``: the broker's attachment to the network (everything in and out of it)."""
        return [f"{NODE}{node}"]

    def broker_paths(self, node: int) -> list[str]:
        """The data paths into ``node`` (host clients, the pipeline, peers)."""
        return [f"client-{node}", f"app-{node}", f"internal-{node}"]

    def client_address(self, node: int) -> str:
        return f"127.0.0.1:{self.layout.proxy_client_port(node)}"

    # ------------------------------------------------------------------ cut / restore
    def _broker(self, path: str):
        node = int(path[len(NODE):])
        c = self.site.get(self.layout.broker_host(node))
        if c is None:
            raise BackendError(f"{path}: node {node} has no container")
        return node, c

    def _net(self):
        net = self.site.network()
        if net is None:
            raise BackendError(f"the docker network {self.layout.network} is gone")
        return net

    def cut(self, paths: list[str]) -> None:
        """Disconnect ``node-<i>`` paths from the network; disable proxy paths."""
        for p in paths:
            if p.startswith(NODE):
                _, c = self._broker(p)
                with contextlib.suppress(docker.errors.APIError):  # already disconnected
                    self._net().disconnect(c, force=True)
            else:
                self.api.set_enabled(p, False)

    def restore(self, paths: list[str]) -> None:
        """Reconnect ``node-<i>`` (same address and alias); re-enable proxies."""
        for p in paths:
            if p.startswith(NODE):
                node, c = self._broker(p)
                if not self._attached(c):
                    self._net().connect(c, aliases=[self.layout.broker_host(node)],
                                        ipv4_address=self.layout.broker_ip(node))
            else:
                self.api.set_enabled(p, True)

    def _attached(self, c) -> bool:
        c.reload()
        return self.layout.network in ((c.attrs.get("NetworkSettings") or {}).get("Networks") or {})

    def cut_paths(self) -> list[str]:
        """Proxies disabled now, and nodes not attached to the network."""
        cut = [n for n, p in self.api.proxies().items() if not p.get("enabled", True)]
        for n in range(1, self.layout.nodes + 1):
            c = self.site.get(self.layout.broker_host(n))
            if c is not None and not self._attached(c):
                cut.append(f"{NODE}{n}")
        return sorted(cut)

    # ------------------------------------------------------------------ slow
    def slow(self, path: str, kind: str, attrs: dict, name: str, direction: str = "downstream",
             toxicity: float = 1.0) -> str:
        """Add toxic ``kind`` with ``attrs`` to proxy ``path`` (toxiproxy's attributes and units), applied to
        each connection with probability ``toxicity``."""
        if path.startswith(NODE):
            raise BackendError(f"{path} is a network attachment, it cannot be slowed; slow a proxy path "
                               "(client-, app-, internal-<i>)")
        return self.api.add_toxic(path, kind, attrs, stream=direction, name=name, toxicity=toxicity)["name"]

    def slowdowns(self, path: str) -> list[str]:
        return [] if path.startswith(NODE) else [t["name"] for t in self.api.toxics(path)]

    def unslow(self, path: str, name: str) -> None:
        self.api.remove_toxic(path, name)

    def heal(self) -> None:
        """Reconnect every disconnected node, re-enable every proxy, remove every toxic."""
        self.restore([p for p in self.cut_paths() if p.startswith(NODE)])
        self.api.reset()

    def stop(self) -> None:
        """Remove toxiproxy's container (its logs saved). The run's network goes with the cluster."""
        self._api = None
        c = self.site.get("toxiproxy")
        if c is not None:
            self.site.remove(c)

    def kill(self) -> None:
        self.stop()
