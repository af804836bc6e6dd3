"""The cluster's network behind toxiproxy: one proxy per path, so every path can be cut or slowed.

Proxies (names):

* ``client-<i>``   – clients (workload, Spark's source, the sink, the checker) → broker ``i``;
* ``internal-<i>`` – other brokers' replica fetchers → broker ``i`` (the inter-broker listener);
* ``ctrl-<i>-<j>`` – node ``i`` → node ``j``'s controller (the KRaft quorum and broker heartbeats), one
  per ordered pair because each node's ``controller.quorum.voters`` names its own proxies.

Brokers advertise the ``client-`` and ``internal-`` proxy ports (``backends/local/kafka.py``), so Kafka
clients, which connect to whatever the metadata advertises, always go through them.

Limit: the inter-broker listener is advertised once for all peers, so ``internal-<i>`` carries every
peer's fetches *to* ``i``; broker ``i``'s own fetches from other leaders go through their proxies.
Isolating ``i`` therefore cuts everything into ``i`` and all of ``i``'s quorum links, which fences it
(no controller heartbeat), but not its outbound replica fetches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backends.local.kafka import ClusterSpec
from backends.local.toxiproxy import ToxiproxyClient, ToxiproxyServer, build_server


@dataclass
class ProxyNetwork:
    """Owns the toxiproxy server and the proxies of one cluster. Start it before the brokers."""

    spec: ClusterSpec
    server: ToxiproxyServer = field(default_factory=ToxiproxyServer)
    names: list[str] = field(default_factory=list)

    def start(self, log_path: Path) -> "ProxyNetwork":
        """Build (cached) and start toxiproxy, then create every proxy.

        Raises: ``backends.local.toxiproxy.ToxiproxyBuildError`` / ``ToxiproxyStartError`` with the fix.
        """
        build_server()
        self.server.start(log_path)
        c = self.client
        for n in self.spec.node_specs:
            self._add(c, f"client-{n.node_id}", n.client_proxy, n.client_port)
            self._add(c, f"internal-{n.node_id}", n.internal_proxy, n.internal_port)
            for j, port in n.controller_proxy:
                self._add(c, f"ctrl-{n.node_id}-{j}", port, self.spec.node(j).controller_port)
        return self

    def _add(self, c: ToxiproxyClient, name: str, listen: int, upstream: int) -> None:
        c.create_proxy(name, f"127.0.0.1:{listen}", f"127.0.0.1:{upstream}")
        self.names.append(name)

    @property
    def client(self) -> ToxiproxyClient:
        return self.server.client

    def client_paths(self, node: int) -> list[str]:
        """Clients → ``node``."""
        return [f"client-{node}"]

    def isolation_paths(self, node: int) -> list[str]:
        """Every proxy into ``node`` and every quorum link out of it."""
        others = [m.node_id for m in self.spec.node_specs if m.node_id != node]
        return ([f"client-{node}", f"internal-{node}"] + [f"ctrl-{j}-{node}" for j in others]
                + [f"ctrl-{node}-{j}" for j in others])

    def broker_paths(self, node: int) -> list[str]:
        """Data paths into ``node`` (client and inter-broker) — the ones a slow network slows."""
        return [f"client-{node}", f"internal-{node}"]

    def cut(self, names: list[str]) -> None:
        for n in names:
            self.client.set_enabled(n, False)

    def restore(self, names: list[str]) -> None:
        for n in names:
            self.client.set_enabled(n, True)

    def disabled(self) -> list[str]:
        """Names of proxies currently cut."""
        return sorted(n for n, p in self.client.proxies().items() if not p.get("enabled", True))

    def heal(self) -> None:
        """Re-enable every proxy and remove every toxic (``POST /reset``)."""
        if self.server.running:
            self.client.reset()

    def stop(self) -> None:
        self.server.stop()
