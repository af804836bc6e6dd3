"""Where the local cluster's nodes live: their ports on 127.0.0.1 and their directories.

Each node listens on three ports: ``CLIENT`` (producers, consumers, admin), ``INTERNAL`` (replication
between brokers) and ``CONTROLLER`` (the KRaft quorum). When the cluster is proxied, each path also has
a toxiproxy port (``backends/local/faultproxy.py``) that the node advertises instead, so that any path
can be cut or slowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeSpec:
    """Ports of one KRaft node (``node_id`` 1..n). Ports are TCP ports on 127.0.0.1.

    ``*_port`` are the ports the node binds. When the cluster is proxied, ``client_proxy`` and
    ``internal_proxy`` are the toxiproxy ports it advertises instead, and ``controller_proxy[j]`` is
    the port through which *this* node reaches node ``j``'s controller (one proxy per ordered pair,
    so a single node's quorum links can be cut).
    """

    node_id: int
    client_port: int
    internal_port: int
    controller_port: int
    client_proxy: int = 0
    internal_proxy: int = 0
    controller_proxy: tuple[tuple[int, int], ...] = ()

    def controller_via(self, j: int) -> int:
        """Port this node uses to reach node ``j``'s controller (the proxy when there is one)."""
        return dict(self.controller_proxy).get(j, 0)


@dataclass
class ClusterSpec:
    """Shape of the local cluster.

    Attributes:
        nodes: number of combined broker+controller nodes (3 by default; RF 3 / min ISR 2 need 3).
        base_port: node ``i`` (1-based) uses ``base_port+i`` (client), ``base_port+100+i`` (internal),
            ``base_port+200+i`` (controller).
        heap_mb: broker JVM heap (``-Xmx``), MiB.
        data_dir: where configs, data and the state file live.
        log_dir: broker logs (default ``data_dir/logs``).
    """

    data_dir: Path
    nodes: int = 3
    base_port: int = 19090
    heap_mb: int = 512
    log_dir: Path | None = None
    proxied: bool = False

    @property
    def logs(self) -> Path:
        return self.log_dir or self.data_dir / "logs"

    def ports(self) -> list[int]:
        """Every TCP port the cluster (and its proxies, when proxied) binds."""
        out = []
        for n in self.node_specs:
            out += [n.client_port, n.internal_port, n.controller_port]
            if self.proxied:
                out += [n.client_proxy, n.internal_proxy] + [p for _, p in n.controller_proxy]
        return out

    def node(self, i: int) -> NodeSpec:
        b = self.base_port
        if not self.proxied:
            return NodeSpec(i, b + i, b + 100 + i, b + 200 + i)
        pairs = tuple((j, b + 300 + i * self.nodes + j) for j in range(1, self.nodes + 1) if j != i)
        return NodeSpec(i, b + i, b + 100 + i, b + 200 + i, b + 50 + i, b + 150 + i, pairs)

    @property
    def node_specs(self) -> list[NodeSpec]:
        return [self.node(i) for i in range(1, self.nodes + 1)]

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of every node's client listener (its proxy when proxied)."""
        return ",".join(f"127.0.0.1:{n.client_proxy if self.proxied else n.client_port}"
                        for n in self.node_specs)
