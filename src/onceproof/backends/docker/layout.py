"""Where the Docker backend's containers live: names, addresses, ports and the brokers' configuration.

Pure data, no Docker call: what :mod:`onceproof.backends.docker.cluster`, :mod:`.network` and :mod:`.spark` build
their containers from, and what the unit tests check.

Every container of a run is on one user-defined bridge network (``onceproof-<run id>``) with a fixed
IPv4 address in a /24 the backend picks (``10.231.<k>.0/24``; a fixed address survives a ``network
disconnect`` + ``connect`` and a container restart, so the peers' JVM DNS caches never hold a stale one).
Each KRaft node ``i`` (hostname and alias ``kafka<i>``) has four listeners:

==============  =====================  ===================================================================
listener        binds (in container)   advertised
==============  =====================  ===================================================================
``CLIENT``      ``0.0.0.0:9091``       ``127.0.0.1:<host port>``: clients on the host (workload, live
                                       reader, checker, nemesis probes). The container port is published
                                       on 127.0.0.1 only; the host port is ``base + i`` (leased,
                                       ``backends/common/ports.py``), or toxiproxy's ``base + 50 + i``
                                       when the cluster is proxied.
``APP``         ``0.0.0.0:9094``       ``kafka<i>:9094``: clients inside the network (the Spark driver and
                                       executors); ``toxiproxy:<9200 + i>`` when proxied.
``INTERNAL``    ``0.0.0.0:9092``       ``kafka<i>:9092``: other brokers' replica fetchers;
                                       ``toxiproxy:<9100 + i>`` when proxied.
``CONTROLLER``  ``0.0.0.0:9093``       (not advertised) the KRaft quorum, ``<i>@kafka<i>:9093``.
==============  =====================  ===================================================================

So host-side and in-network clients each get metadata they can use (Kafka answers with the addresses
of the listener a client connected on), and every path a fault needs — host clients → node, Spark →
node, peers → node, the node itself — can be cut or slowed on its own.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from onceproof.backends.common import broker_config
from onceproof.backends.common.layout import ClusterSpec

CLIENT_PORT = 9091
INTERNAL_PORT = 9092
CONTROLLER_PORT = 9093
APP_PORT = 9094
PROXY_API_PORT = 8474  # toxiproxy's own default
PROXY_HOST = "toxiproxy"
MASTER_HOST = "spark-master"
MASTER_PORT = 7077
DATA_DIR = "/var/lib/kafka/data"  # log.dirs inside a broker container (bind-mounted from the host)
WORKERS = 2

# the last octet of each fixed address in the run's /24; driver containers take dynamic ones from .128/25
_GATEWAY, _PROXY, _DATABASE, _MASTER, _WORKER0, _BROKER0 = 1, 5, 6, 20, 20, 10
DATABASE_HOST = "postgres"
DATABASE_PORT = 5432


def subnet_candidates(seed: int, count: int = 64) -> list[str]:
    """``10.231.<k>.0/24`` subnets to try for a run's network, starting at ``seed % 256`` (``count`` of
    them, wrapping): the engine refuses one that overlaps another network, and the next is tried."""
    return [f"10.231.{(seed + j) % 256}.0/24" for j in range(count)]


@dataclass(frozen=True)
class DockerLayout:
    """One run's containers. ``run_id``: short hex, in every name and label; ``nodes``: KRaft nodes;
    ``base_port``: the leased host port range (see the module docstring); ``proxied``: the brokers
    advertise toxiproxy's ports; ``subnet``: the network's ``a.b.c.0/24``."""

    run_id: str
    nodes: int
    base_port: int
    proxied: bool = False
    subnet: str = "10.231.0.0/24"

    # ------------------------------------------------------------------ names
    @property
    def network(self) -> str:
        """The bridge network's name."""
        return f"onceproof-{self.run_id}"

    def container(self, role: str) -> str:
        """Container name of ``role`` (``kafka1``, ``toxiproxy``, ``spark-master``, ``driver-3``)."""
        return f"onceproof-{self.run_id}-{role}"

    @staticmethod
    def broker_host(node: int) -> str:
        """Hostname and network alias of node ``node``."""
        return f"kafka{node}"

    @staticmethod
    def worker_host(k: int) -> str:
        return f"spark-worker-{k}"

    # ------------------------------------------------------------------ addresses
    def _ip(self, last: int) -> str:
        net = ipaddress.ip_network(self.subnet)
        return str(net.network_address + last)

    @property
    def gateway(self) -> str:
        return self._ip(_GATEWAY)

    @property
    def ip_range(self) -> str:
        """Where the engine allocates dynamic addresses (driver containers): the upper half."""
        net = ipaddress.ip_network(self.subnet)
        return str(list(net.subnets(new_prefix=net.prefixlen + 1))[1])

    def broker_ip(self, node: int) -> str:
        return self._ip(_BROKER0 + node)

    @property
    def proxy_ip(self) -> str:
        return self._ip(_PROXY)

    @property
    def database_ip(self) -> str:
        """The database container's address (alias :data:`DATABASE_HOST`)."""
        return self._ip(_DATABASE)

    @property
    def master_ip(self) -> str:
        return self._ip(_MASTER)

    def worker_ip(self, k: int) -> str:
        return self._ip(_WORKER0 + k)

    # ------------------------------------------------------------------ ports
    def client_host_port(self, node: int) -> int:
        """Host port (127.0.0.1) where node ``node``'s CLIENT listener is published."""
        return self.base_port + node

    def proxy_client_port(self, node: int) -> int:
        """Host port (and the port inside toxiproxy's container) of proxy ``client-<node>``."""
        return self.base_port + 50 + node

    @staticmethod
    def proxy_internal_port(node: int) -> int:
        """Port of proxy ``internal-<node>`` inside the network."""
        return 9100 + node

    @staticmethod
    def proxy_app_port(node: int) -> int:
        """Port of proxy ``app-<node>`` inside the network."""
        return 9200 + node

    def advertised(self, node: int) -> dict[str, str]:
        """``{listener: host:port}`` node ``node`` advertises."""
        h = self.broker_host(node)
        if self.proxied:
            return {"CLIENT": f"127.0.0.1:{self.proxy_client_port(node)}",
                    "INTERNAL": f"{PROXY_HOST}:{self.proxy_internal_port(node)}",
                    "APP": f"{PROXY_HOST}:{self.proxy_app_port(node)}"}
        return {"CLIENT": f"127.0.0.1:{self.client_host_port(node)}", "INTERNAL": f"{h}:{INTERNAL_PORT}",
                "APP": f"{h}:{APP_PORT}"}

    @property
    def bootstrap(self) -> str:
        """Host-side clients' bootstrap: every node's advertised CLIENT address."""
        return ",".join(self.advertised(n)["CLIENT"] for n in range(1, self.nodes + 1))

    @property
    def network_bootstrap(self) -> str:
        """In-network clients' bootstrap (the pipeline's): every node's advertised APP address."""
        return ",".join(self.advertised(n)["APP"] for n in range(1, self.nodes + 1))

    @property
    def master_url(self) -> str:
        return f"spark://{MASTER_HOST}:{MASTER_PORT}"

    # ------------------------------------------------------------------ brokers
    def server_properties(self, node: int) -> dict[str, str]:
        """``server.properties`` of node ``node``: the local backend's broker settings (RF 3, min ISR 2,
        no unclean election, the transaction log's RF 3 / min ISR 2, ...; ``backends/common/broker_config.py``)
        with this layout's listeners, quorum and data directory."""
        spec = ClusterSpec(Path("."), nodes=self.nodes, base_port=self.base_port)
        text = broker_config.server_properties(spec, spec.node(node), Path(DATA_DIR))
        props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        adv = self.advertised(node)
        props.update({
            "node.id": str(node),
            "controller.quorum.voters": ",".join(f"{m}@{self.broker_host(m)}:{CONTROLLER_PORT}"
                                                 for m in range(1, self.nodes + 1)),
            "listeners": f"CLIENT://0.0.0.0:{CLIENT_PORT},INTERNAL://0.0.0.0:{INTERNAL_PORT},"
                         f"APP://0.0.0.0:{APP_PORT},CONTROLLER://0.0.0.0:{CONTROLLER_PORT}",
            "advertised.listeners": ",".join(f"{k}://{v}" for k, v in adv.items()),
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,APP:PLAINTEXT,"
                                              "CONTROLLER:PLAINTEXT",
            "log.dirs": DATA_DIR,
        })
        return props

    def broker_env(self, node: int, cluster_id: str) -> dict[str, str]:
        """The environment of node ``node``'s container: :meth:`server_properties` in the official
        apache/kafka image's convention (``docker/kafka/onceproof/run``), plus ``CLUSTER_ID``."""
        env = {kafka_env_name(k): str(v) for k, v in self.server_properties(node).items()}
        env["CLUSTER_ID"] = cluster_id
        return env

    def listen_ports(self) -> set[int]:
        """Ports every broker must listen on (inside its container) to be healthy."""
        return {CLIENT_PORT, INTERNAL_PORT, APP_PORT, CONTROLLER_PORT}


def kafka_env_name(prop: str) -> str:
    """``log.dirs`` → ``KAFKA_LOG_DIRS``: the apache/kafka image's rule (``KafkaDockerWrapper``):
    ``_`` → ``__``, ``-`` → ``___``, ``.`` → ``_``, upper case, ``KAFKA_`` prefix."""
    return "KAFKA_" + prop.replace("_", "__").replace("-", "___").replace(".", "_").upper()
