"""Network faults over SSH (``backends/ssh/network.py``) on three broker nodes running Kafka over SSH: a cut
of ``internal-1`` stops broker 1's **outbound** replica fetches too (its OUT chain's counters, and a connect
from node 1 to node 2's inter-broker port timing out), random loss counted by its rules, a bandwidth limit
by tc, and no chain or qdisc left on any node after ``stop``.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from onceproof.backends.base import BackendError
from onceproof.backends.ssh import inventory
from onceproof.backends.ssh.kafka import SshKafkaCluster
from onceproof.backends.ssh.network import SshNetwork
from onceproof.backends.ssh.transport import SshHub
from tests.docker.ssh_nodes import ssh_nodes

pytestmark = [pytest.mark.docker, pytest.mark.extended]

ROLES = (["broker"], ["broker"], ["broker"], ["spark-master", "spark-worker", "driver"])


def _connects(remote, host: str, port: int) -> bool:
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=3).close()"
    return remote.run(["python3", "-c", probe], timeout_s=15).returncode == 0


def test_cuts_both_ways_loss_and_bandwidth_over_ssh_and_nothing_left(docker_engine, docker_images, tmp_path):
    with ssh_nodes(docker_engine.client, docker_images["node"].tag, tmp_path / "nodes", count=4, roles=ROLES) as n:
        inv = inventory.load(n.nodes_toml)
        run = uuid.uuid4().hex[:12]
        with SshHub(inv) as hub:
            cluster = SshKafkaCluster(inv, hub, run, tmp_path / "cluster")
            net = SshNetwork(inv, hub, run)
            r1, r2 = hub.remote("n1"), hub.remote("n2")
            try:
                net.start()
                assert r1.run(["iptables", "-w", "-S", "INPUT"], root=True).stdout.splitlines()[1] == \
                    f"-A INPUT -j OP-{run[:8]}-IN"
                cluster.up(timeout_s=180)
                admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: its futures need it alive
                admin.create_topics([NewTopic("t", 6, 3)])["t"].result(60)
                p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})

                # internal-1 cut both ways: node 1 cannot reach node 2's inter-broker port, nor node 2 node 1's
                assert _connects(r1, n.ips["n2"], 9093)
                net.cut(["internal-1"])
                assert net.cut_paths() == ["internal-1"]
                assert not _connects(r1, n.ips["n2"], 9093) and not _connects(r2, n.ips["n1"], 9093)
                assert _connects(r1, n.ips["n2"], 9092), "the client port stays open"
                for i in range(600):
                    p.produce("t", value=str(i).encode())
                p.flush(30)
                time.sleep(3)
                counts = net.dropped_packets(1)
                assert counts.get("internal-1", 0) > 0, counts
                out_chain = r1.run(["iptables", "-w", "-L", f"OP-{run[:8]}-OUT", "-v", "-x", "-n"], root=True).stdout
                outbound = [ln for ln in out_chain.splitlines() if "dpt:9093" in ln]
                assert outbound and int(outbound[0].split()[0]) > 0, out_chain  # broker 1's own fetches dropped
                net.restore(["internal-1"])
                assert net.cut_paths() == [] and _connects(r1, n.ips["n2"], 9093)

                # random loss on the data ports of a broker that leads a partition now (one that leads none may
                # see no packet to its ports in a second), counted by its rules
                lossy = admin.list_topics("t", timeout=10).topics["t"].partitions[0].leader
                net.drop(lossy, 0.5)
                for i in range(600):
                    p.produce("t", value=str(i).encode())
                p.flush(60)
                assert net.dropped()["dropped"] > 0, net.dropped_packets(lossy)
                net.undrop()

                # bandwidth on broker 3's client port (tc htb + tbf); latency is refused (no netem)
                name = net.slow("client-3", "bandwidth", {"rate": 32}, "bw")
                assert net.slowdowns("client-3") == [name]
                with pytest.raises(BackendError, match="netem"):
                    net.slow("client-2", "latency", {"latency": 100}, "lat")
                net.unslow("client-3", name)
                assert net.slowdowns("client-3") == []
                net.slow("client-3", "bandwidth", {"rate": 32}, "bw2")  # left for stop() to remove
            finally:
                net.stop()
                cluster.down()
            for node in ("n1", "n2", "n3"):
                r = hub.remote(node)
                assert "OP-" not in r.run(["iptables", "-w", "-S"], root=True).stdout
                assert "htb" not in r.run(["tc", "qdisc", "show"], root=True).stdout
