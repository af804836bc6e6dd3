"""``nodes.toml``: the machines of ``--backend ssh`` (Jepsen's model: a list of nodes reached over SSH), as
frozen data. Pure: reading the file is the only I/O.

The schema (``docs/backends.md``, "The ssh backend"; a worked example is ``examples/nodes.toml``)::

    node = [
      { name = "n1", host = "10.232.7.11", roles = ["broker"] },
      ...
      { name = "n4", host = "10.232.7.14", roles = ["spark-master", "spark-worker", "driver"] },
    ]
    [ssh]       user, key_file, known_hosts (required), port = 22, become = "sudo" | ""
    [run]       root = "/var/lib/onceproof", lease_s = 20
    [kafka]     ports = { client = 9092, internal = 9093, controller = 9094 }, heap_mb = 512

A node's own ``user``/``port``/``key_file`` override ``[ssh]``'s; ``address`` (how peers and clients reach
it) defaults to ``host`` (where SSH connects). Rules: at least one ``broker``, exactly one
``spark-master`` and one ``driver``, at least one ``spark-worker``; names, hosts and addresses unique.
``known_hosts`` is required and never defaulted: a missing or empty trust set would make every host key
"unknown", and onceproof never accepts a key silently (``onceproof ssh trust`` adds one after a ``y``).

Errors: :class:`InventoryError`, whose message starts with ``<file>: <key>`` and names the fix; the CLI
turns it into exit 254.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROLES = ("broker", "spark-master", "spark-worker", "driver")
"""What a node can be: a KRaft broker (broker and controller in one process, the combined mode the
local and Docker backends run), Spark's standalone master or a worker, the node the driver runs on."""
BECOME = ("sudo", "")
"""How root commands (iptables, tc) run: ``sudo -n`` before them, or nothing when the user is root."""
DEFAULT_ROOT = "/var/lib/onceproof"
"""The directory onceproof owns on every node (it deletes only below it)."""


class InventoryError(ValueError):
    """``nodes.toml`` is unreadable or breaks a rule; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class SshSettings:
    """How to reach every node (``[ssh]``).

    Attributes:
        known_hosts: an OpenSSH ``known_hosts`` file; every node's host key must be in it.
        user / port / key_file: defaults for the nodes (a node's own keys win); ``key_file`` None = the
            keys of a running ssh-agent only.
        become: ``"sudo"`` or ``""`` (see :data:`BECOME`).
        connect_timeout_s: TCP + SSH handshake deadline per node, seconds.
    """

    known_hosts: Path
    user: str = "root"
    port: int = 22
    key_file: Path | None = None
    become: str = "sudo"
    connect_timeout_s: float = 15.0


@dataclass(frozen=True)
class KafkaSettings:
    """The brokers' ports on every broker node and their heap (``[kafka]``).

    Attributes:
        client / internal / controller: TCP ports the broker binds on all interfaces: clients, replication
            between brokers, the KRaft quorum.
        heap_mb: the broker JVM's ``-Xmx``, MiB.
    """

    client: int = 9092
    internal: int = 9093
    controller: int = 9094
    heap_mb: int = 512


@dataclass(frozen=True)
class Node:
    """One machine.

    Attributes:
        name: its label in logs and results (``logs/<name>/``).
        host: where SSH connects (a name or an IP).
        address: how peers and the harness's clients reach its services (default ``host``).
        roles: a subset of :data:`ROLES`, in the file's order.
        user / port / key_file: this node's SSH login (``[ssh]``'s unless given).
    """

    name: str
    host: str
    address: str
    roles: tuple[str, ...]
    user: str
    port: int
    key_file: Path | None

    def has(self, role: str) -> bool:
        """Whether this node plays ``role`` (one of :data:`ROLES`)."""
        return role in self.roles


@dataclass(frozen=True)
class Inventory:
    """The whole file: nodes in file order, the SSH settings and the run root.

    Attributes:
        path: the file read (for messages).
        nodes: every node.
        ssh: ``[ssh]``.
        root: ``[run] root``, an absolute POSIX path on every node.
        lease_s: ``[run] lease_s``: how long a node's watchdog waits for the harness's heartbeat, seconds.
    """

    path: Path
    nodes: tuple[Node, ...]
    ssh: SshSettings
    root: PurePosixPath = PurePosixPath(DEFAULT_ROOT)
    lease_s: float = 20.0
    kafka: KafkaSettings = KafkaSettings()

    def with_role(self, role: str) -> list[Node]:
        """The nodes playing ``role``, in file order."""
        return [n for n in self.nodes if n.has(role)]

    @property
    def brokers(self) -> list[Node]:
        """The broker nodes; broker ``i`` (1-based, the harness's numbering) is ``brokers[i - 1]``."""
        return self.with_role("broker")

    def node(self, name: str) -> Node:
        """The node called ``name``. Raises: ``KeyError`` naming the known ones."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in {self.path}; nodes: {', '.join(n.name for n in self.nodes)}")


def _expand(p: str, base: Path) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else (base / q)


def _str(d: dict, key: str, where: str, *, default: str | None = None) -> str:
    v = d.get(key, default)
    if not isinstance(v, str) or (default is None and not v):
        raise InventoryError(f"{where}.{key}: expected a non-empty string, got {v!r}")
    return v


def _port(v: object, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < 65536:
        raise InventoryError(f"{where}.port: expected a TCP port (1-65535), got {v!r}")
    return v


def parse(data: dict, path: Path) -> Inventory:
    """An :class:`Inventory` from ``nodes.toml``'s parsed content; relative paths are taken from ``path``'s
    directory.

    Raises: :class:`InventoryError` (see the module docstring for the rules).
    """
    f = str(path)
    base = path.parent
    known = {"node", "ssh", "run", "kafka"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InventoryError(f"{f}: {unknown[0]}: unknown table; known: {', '.join(sorted(known))}")
    ssh = data.get("ssh", {})
    if not isinstance(ssh, dict):
        raise InventoryError(f"{f}: ssh: expected a table [ssh]")
    ssh_keys = {"user", "port", "key_file", "known_hosts", "become", "connect_timeout_s"}
    bad = sorted(set(ssh) - ssh_keys)
    if bad:
        raise InventoryError(f"{f}: ssh.{bad[0]}: unknown key; known: {', '.join(sorted(ssh_keys))}")
    if "known_hosts" not in ssh:
        raise InventoryError(f"{f}: ssh.known_hosts: required (an OpenSSH known_hosts file holding every "
                             "node's host key; `onceproof ssh trust --nodes FILE` adds them after asking)")
    become = ssh.get("become", "sudo")
    if become not in BECOME:
        raise InventoryError(f"{f}: ssh.become: expected \"sudo\" or \"\" (the user is root), got {become!r}")
    timeout = ssh.get("connect_timeout_s", 15.0)
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise InventoryError(f"{f}: ssh.connect_timeout_s: expected seconds > 0, got {timeout!r}")
    settings = SshSettings(
        known_hosts=_expand(_str(ssh, "known_hosts", f"{f}: ssh"), base),
        user=_str(ssh, "user", f"{f}: ssh", default="root"),
        port=_port(ssh.get("port", 22), f"{f}: ssh"),
        key_file=_expand(_str(ssh, "key_file", f"{f}: ssh"), base) if "key_file" in ssh else None,
        become=become, connect_timeout_s=float(timeout))

    raw = data.get("node")
    if not isinstance(raw, list) or not raw:
        raise InventoryError(f"{f}: node: expected a list of nodes, e.g. "
                             "node = [{ name = \"n1\", host = \"10.0.0.1\", roles = [\"broker\"] }]")
    node_keys = {"name", "host", "address", "roles", "user", "port", "key_file"}
    nodes: list[Node] = []
    for i, n in enumerate(raw):
        where = f"{f}: node[{i}]"
        if not isinstance(n, dict):
            raise InventoryError(f"{where}: expected a table {{ name = ..., host = ..., roles = [...] }}")
        bad = sorted(set(n) - node_keys)
        if bad:
            raise InventoryError(f"{where}.{bad[0]}: unknown key; known: {', '.join(sorted(node_keys))}")
        roles = n.get("roles")
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            raise InventoryError(f"{where}.roles: expected a non-empty list of {', '.join(ROLES)}")
        wrong = [r for r in roles if r not in ROLES]
        if wrong:
            raise InventoryError(f"{where}.roles: unknown role {wrong[0]!r}; choose from {', '.join(ROLES)}")
        host = _str(n, "host", where)
        nodes.append(Node(
            name=_str(n, "name", where), host=host, address=_str(n, "address", where, default=host),
            roles=tuple(dict.fromkeys(roles)), user=_str(n, "user", where, default=settings.user),
            port=_port(n.get("port", settings.port), where),
            key_file=_expand(_str(n, "key_file", where), base) if "key_file" in n else settings.key_file))
    for attr in ("name", "host", "address"):
        seen: dict[str, int] = {}
        for i, n in enumerate(nodes):
            v = getattr(n, attr)
            if v in seen and not (attr in ("host", "address") and nodes[seen[v]].port != n.port):
                raise InventoryError(f"{f}: node[{i}].{attr}: {v!r} is also node[{seen[v]}]'s; each node needs "
                                     f"its own {attr}")
            seen[v] = i
    counts = {r: sum(r in n.roles for n in nodes) for r in ROLES}
    if counts["broker"] < 1:
        raise InventoryError(f"{f}: node: no node has the role \"broker\"; give at least one (three for "
                             "replication factor 3)")
    for r in ("spark-master", "driver"):
        if counts[r] != 1:
            raise InventoryError(f"{f}: node: exactly one node must have the role {r!r}, found {counts[r]}")
    if counts["spark-worker"] < 1:
        raise InventoryError(f"{f}: node: no node has the role \"spark-worker\"; give at least one")

    run = data.get("run", {})
    if not isinstance(run, dict):
        raise InventoryError(f"{f}: run: expected a table [run]")
    bad = sorted(set(run) - {"root", "lease_s"})
    if bad:
        raise InventoryError(f"{f}: run.{bad[0]}: unknown key; known: lease_s, root")
    root = PurePosixPath(_str(run, "root", f"{f}: run", default=DEFAULT_ROOT))
    if not root.is_absolute() or root == PurePosixPath("/") or ".." in root.parts:
        raise InventoryError(f"{f}: run.root: expected an absolute directory below / that onceproof may own, "
                             f"e.g. {DEFAULT_ROOT!r}; got {str(root)!r}")
    lease = run.get("lease_s", 20)
    if not isinstance(lease, int | float) or isinstance(lease, bool) or not 5 <= lease <= 600:
        raise InventoryError(f"{f}: run.lease_s: expected seconds between 5 and 600, got {lease!r}")
    return Inventory(path=path, nodes=tuple(nodes), ssh=settings, root=root, lease_s=float(lease),
                     kafka=_kafka(data.get("kafka", {}), f))


def _kafka(k: object, f: str) -> KafkaSettings:
    if not isinstance(k, dict):
        raise InventoryError(f"{f}: kafka: expected a table [kafka]")
    bad = sorted(set(k) - {"ports", "heap_mb"})
    if bad:
        raise InventoryError(f"{f}: kafka.{bad[0]}: unknown key; known: heap_mb, ports")
    ports = k.get("ports", {})
    if not isinstance(ports, dict) or set(ports) - {"client", "internal", "controller"}:
        raise InventoryError(f"{f}: kafka.ports: expected {{ client = 9092, internal = 9093, controller = 9094 }}")
    d = KafkaSettings()
    got = {n: _port(ports.get(n, getattr(d, n)), f"{f}: kafka.ports.{n}") for n in ("client", "internal", "controller")}
    if len(set(got.values())) != 3:
        raise InventoryError(f"{f}: kafka.ports: the three ports must differ, got {got}")
    heap = k.get("heap_mb", d.heap_mb)
    if not isinstance(heap, int) or isinstance(heap, bool) or not 128 <= heap <= 65536:
        raise InventoryError(f"{f}: kafka.heap_mb: expected MiB between 128 and 65536, got {heap!r}")
    return KafkaSettings(heap_mb=heap, **got)


def load(path: Path | str) -> Inventory:
    """Read and check ``nodes.toml`` at ``path``.

    Raises: :class:`InventoryError` when the file is missing, not TOML, or breaks a rule.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise InventoryError(f"{p}: no such file; give --nodes a nodes.toml (docs/backends.md shows one)") from None
    except tomllib.TOMLDecodeError as e:
        raise InventoryError(f"{p}: not TOML: {e}") from None
    return parse(data, p)
