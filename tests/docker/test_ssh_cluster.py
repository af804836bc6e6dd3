"""A KRaft cluster installed and run over SSH (``backends/ssh/kafka.py``) on three ``onceproof/node``
containers the harness reaches only over SSH: jars shipped once, brokers formatted and started through
``onceproof-node.py``, then killed, paused, resumed and stopped with the evidence a nemesis reads, records
written with ``acks=all`` and read back through every change, and nothing of the run left on any node.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from onceproof.backends.ssh import inventory
from onceproof.backends.ssh.kafka import SshKafkaCluster
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.transport import SshHub
from tests.docker.ssh_nodes import ssh_nodes

pytestmark = [pytest.mark.docker, pytest.mark.extended]

ROLES = (["broker"], ["broker"], ["broker"], ["spark-master", "spark-worker", "driver"])


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for k in range(start, start + n):
        p.produce(topic, key=str(k).encode(), value=str(k).encode())
    assert p.flush(60) == 0


def _read_all(bootstrap: str, topic: str, expect: int, timeout_s: float = 60.0) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                out.append(int(m.value()))
    finally:
        c.close()
    return sorted(out)


def test_brokers_over_ssh_up_killed_paused_stopped_and_gone(docker_engine, docker_images, tmp_path):
    with ssh_nodes(docker_engine.client, docker_images["node"].tag, tmp_path / "nodes", count=4, roles=ROLES) as n:
        inv = inventory.load(n.nodes_toml)
        run = uuid.uuid4().hex[:12]
        with SshHub(inv) as hub:
            cluster = SshKafkaCluster(inv, hub, run, tmp_path / "cluster")
            t0 = time.monotonic()
            try:
                cluster.up(timeout_s=180)
                up_s = time.monotonic() - t0
                assert cluster.version and cluster.bootstrap.count(":9092") == 3
                assert all(cluster.state(i).alive for i in cluster.nodes)

                admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
                admin.create_topics([NewTopic("t", 3, 3)])["t"].result(60)
                _produce(cluster.bootstrap, "t", 0, 300)

                killed = cluster.kill(1)
                assert killed.pid and killed.status == "gone"
                assert cluster.helpers[1].status("broker-1")["exit"]["signal"] == 9
                _produce(cluster.bootstrap, "t", 300, 300)  # min ISR 2 of RF 3: one broker down is fine
                cluster.start(1)
                cluster.healthy(120)

                cluster.pause(2)
                assert cluster.state(2).status == "stopped"
                cluster.resume(2)
                assert cluster.state(2).status in ("sleeping", "running")

                t1 = time.monotonic()
                cluster.stop(3, clean=True, grace_s=20)
                assert not cluster.state(3).alive and time.monotonic() - t1 < 30
                cluster.start(3)
                cluster.healthy(120)
                assert _read_all(cluster.bootstrap, "t", 600) == list(range(600))
            finally:
                cluster.down()
            logs = cluster.log_files()
            assert {p.parent.name for p in logs} == {"n1", "n2", "n3"}
            broker_logs = [p.read_text(errors="replace") for p in logs if p.name.startswith("broker-")]
            assert any("Kafka Server started" in t for t in broker_logs), [t[-300:] for t in broker_logs]
            # a second cluster of another run finds the jars there: nothing uploaded again
            again = SshKafkaCluster(inv, hub, uuid.uuid4().hex[:12], tmp_path / "again").install()
            assert again == {1: False, 2: False, 3: False}

            for i in cluster.nodes:
                h = NodeHelper(hub.remote(f"n{i}"), inv.root, run, root_commands=True)
                swept = h.sweep()
                assert swept["groups_killed"] == [] and swept["tagged_killed"] == [], swept
            cluster.clean()
            assert hub.remote("n1").run(["test", "-e", str(cluster._kdir(1))]).returncode == 1
        print(f"3 brokers over SSH up in {up_s:.1f} s")
