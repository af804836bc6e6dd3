"""SSH "nodes" for the ssh backend's tests: containers of ``onceproof/node`` on a Docker network of their
own, which the host reaches on their bridge addresses, **only over SSH** (no port published, nothing of
onceproof inside). The fixture stands where a user's cloud console would: it reads each container's host
key once through ``docker exec`` to write ``known_hosts``, and mounts a fresh public key as the user
``op``'s ``authorized_keys``. It writes ``nodes.toml`` for the inventory.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
from docker.types import IPAMConfig, IPAMPool

import docker

SUBNET_PREFIX = "10.232"
"""The nodes' networks: ``10.232.<k>.0/24`` (the Docker backend uses ``10.231.<k>``)."""
ROLES = (["broker"], ["broker"], ["broker"], ["spark-master", "spark-worker", "driver"], ["spark-worker"])
"""Roles of n1..n5, as in ``docs/backends.md``'s example."""


@dataclass
class Nodes:
    """Running node containers.

    Attributes:
        nodes_toml: the inventory file written for them.
        known_hosts: every node's host key (ed25519), as ``onceproof ssh trust`` would have added it.
        key_file: the private key whose public half every node accepts for ``op``.
        ips: node name → its address on the network.
        containers: node name → the docker SDK container.
    """

    nodes_toml: Path
    known_hosts: Path
    key_file: Path
    ips: dict[str, str]
    containers: dict[str, docker.models.containers.Container]


def new_key(path: Path) -> None:
    """An ed25519 key pair at ``path`` (private, mode 0600) and ``path.pub``, made by asyncssh."""
    k = asyncssh.generate_private_key("ssh-ed25519", comment="onceproof-test")
    k.write_private_key(str(path))
    os.chmod(path, 0o600)
    k.write_public_key(f"{path}.pub")


def _network(client: docker.DockerClient, name: str) -> tuple[docker.models.networks.Network, str]:
    used = {c["Subnet"] for n in client.networks.list() for c in (n.attrs.get("IPAM", {}).get("Config") or [])
            if "Subnet" in c}
    for k in range(1, 255):
        subnet = f"{SUBNET_PREFIX}.{k}.0/24"
        if subnet in used:
            continue
        with contextlib.suppress(docker.errors.APIError):
            net = client.networks.create(name, driver="bridge", ipam=IPAMConfig(
                pool_configs=[IPAMPool(subnet=subnet, gateway=f"{SUBNET_PREFIX}.{k}.1")]))
            return net, f"{SUBNET_PREFIX}.{k}"
    raise RuntimeError("no free 10.232.<k>.0/24 subnet for the SSH nodes' network")


def _wait_ssh(ip: str, timeout_s: float = 60.0) -> None:
    import socket
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((ip, 22), timeout=2) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd on {ip}:22 did not answer within {timeout_s:.0f} s")
        time.sleep(0.3)


@contextlib.contextmanager
def ssh_nodes(client: docker.DockerClient, image: str, tmp: Path, count: int = 2,
              roles: tuple[list[str], ...] = ROLES) -> Iterator[Nodes]:
    """``count`` node containers from ``image`` (``onceproof/node``), up and answering SSH; every container
    and the network are removed at the end, whatever happened."""
    tag = uuid.uuid4().hex[:8]
    tmp.mkdir(parents=True, exist_ok=True)
    key = tmp / "id_ed25519"
    new_key(key)
    auth = tmp / "authorized"
    auth.mkdir(exist_ok=True)
    (auth / "op").write_text((tmp / "id_ed25519.pub").read_text())
    os.chmod(auth / "op", 0o644)
    net, prefix = _network(client, f"onceproof-ssh-{tag}")
    containers: dict[str, docker.models.containers.Container] = {}
    ips: dict[str, str] = {}
    try:
        for i in range(1, count + 1):
            name = f"n{i}"
            ips[name] = f"{prefix}.{10 + i}"
            c = client.containers.create(
                image, name=f"onceproof-ssh-{tag}-{name}", hostname=name, detach=True,
                cap_add=["NET_ADMIN", "SYS_ADMIN"],  # iptables and tc; mount -t tmpfs (disk-full)
                devices=["/dev/fuse:/dev/fuse:rwm"],  # the lazyfs layer (lose-unsynced-writes)
                labels={"org.onceproof.test": "ssh-nodes"},
                volumes={str(auth): {"bind": "/etc/ssh/authorized", "mode": "ro"}})
            containers[name] = c
            net.connect(c, ipv4_address=ips[name])
            with contextlib.suppress(docker.errors.APIError):
                client.networks.get("bridge").disconnect(c)
            c.start()
        lines = []
        for name, c in containers.items():
            _wait_ssh(ips[name])
            rc, out = c.exec_run(["cat", "/etc/ssh/ssh_host_ed25519_key.pub"])
            assert rc == 0, out
            algo, blob = out.decode().split()[:2]
            lines.append(f"{ips[name]} {algo} {blob}\n")
        known = tmp / "known_hosts"
        known.write_text("".join(lines))
        toml = tmp / "nodes.toml"
        node_lines = ",\n".join(
            f'  {{ name = "{n}", host = "{ips[n]}", roles = {roles[i % len(roles)]!r} }}'.replace("'", '"')
            for i, n in enumerate(containers))
        toml.write_text(f"node = [\n{node_lines},\n]\n\n[ssh]\nuser = \"op\"\nkey_file = \"{key}\"\n"
                        f"known_hosts = \"{known}\"\nbecome = \"sudo\"\nconnect_timeout_s = 10\n")
        yield Nodes(toml, known, key, ips, containers)
    finally:
        for c in containers.values():
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
        with contextlib.suppress(docker.errors.APIError):
            net.remove()


@pytest.fixture(scope="module")
def nodes(docker_engine, docker_images, tmp_path_factory):
    """Two nodes for a test module (n1 a broker, n2 the Spark node), removed at its end."""
    with ssh_nodes(docker_engine.client, docker_images["node"].tag, tmp_path_factory.mktemp("ssh"), count=2,
                   roles=(["broker"], ["spark-master", "spark-worker", "driver"])) as n:
        yield n
