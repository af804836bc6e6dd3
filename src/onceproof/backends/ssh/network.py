"""The cluster's network under faults on the broker nodes of ``--backend ssh``: iptables and tc, run over SSH,
touching nothing that is not this run's: the ssh backend's :class:`onceproof.backends.base.FaultNetwork` and
:class:`onceproof.backends.base.PacketLoss`.

Jepsen's ``jepsen.net/iptables`` drops with ``-A INPUT -s <peer> -j DROP`` and heals with ``iptables -F``, which
flushes every rule of the machine ("assumes we control everything": ``jepsen/src/jepsen/net.clj``). On a
user's machine that is not ours to do, so every rule lives in two chains of the run's own,
``OP-<run8>-IN`` and ``OP-<run8>-OUT``, jumped to from position 1 of ``INPUT`` and ``OUTPUT`` (before a
user's ``ESTABLISHED`` accept), each rule commented ``op:<run8>:<path>``; port 22 is never matched. The node
helper's sweep removes the chains after a dead harness (``backends/ssh/node_helper.py``).

Paths (the toxiproxy names, so ``nemesis/network.py`` reads the same evidence), each cut in **both
directions** on its node, so a cut broker's own outbound fetches stop too (the local backend's proxy cannot
do that):

* ``client-<n>``: packets to and from the broker's client port;
* ``internal-<n>``: to and from its inter-broker port, and its own connections to the other brokers'
  inter-broker port (its replica fetchers);
* ``ctrl-<n>``: to and from the KRaft controller port, both ways.

A cut is ``DROP`` (Jepsen's semantics: open connections stall, new ones time out), not a reset.

Slowdowns: ``bandwidth`` only (``tc``: a root ``htb`` qdisc, handle ``4f50:``, whose default class is
unshaped and whose class ``4f50:20`` carries a ``tbf`` leaf at the rate; a ``u32`` filter sends the path's
source port there, so SSH and everything else stay unshaped; the qdisc is recorded in the run's
``net/qdisc-<dev>.json`` for the sweep). The kernels this was built on have no ``sch_netem``, so latency,
loss by netem, reordering and duplication are refused with that reason; random loss is
:meth:`SshNetwork.drop` (``-m statistic --mode random``, iptables-extensions(8)).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex

from onceproof.backends.base import BackendError
from onceproof.backends.ssh.inventory import Inventory
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.remote import RemoteError
from onceproof.backends.ssh.transport import SshHub

HTB = "4f50:"
"""The handle of the root qdisc this module adds (and the only one it deletes)."""
KINDS = frozenset({"bandwidth"})
"""The slowdowns this network can make."""
_COMMENT = re.compile(r'--comment "?op:([0-9a-f]+):([a-z0-9-]+)"?')


def chain_names(run_id: str) -> tuple[str, str]:
    """``(OP-<run8>-IN, OP-<run8>-OUT)``."""
    return f"OP-{run_id[:8]}-IN", f"OP-{run_id[:8]}-OUT"


def path_rules(path: str, ports: dict[str, int], run_id: str) -> list[tuple[str, list[str]]]:
    """The rules that cut ``path`` on its own node: ``[(chain, match argv)]``, each ending in ``-j DROP`` with
    the path's comment. Pure. Raises ``ValueError`` for an unknown path."""
    kind = path.rsplit("-", 1)[0]
    port = {"client": ports["client"], "internal": ports["internal"], "ctrl": ports["controller"]}.get(kind)
    if port is None:
        raise ValueError(f"unknown path {path!r}: client-<n>, internal-<n> or ctrl-<n>")
    cin, cout = chain_names(run_id)
    tag = ["-m", "comment", "--comment", f"op:{run_id[:8]}:{path}", "-j", "DROP"]
    rules = [(cin, ["-p", "tcp", "--dport", str(port), *tag]), (cout, ["-p", "tcp", "--sport", str(port), *tag])]
    if kind in ("internal", "ctrl"):  # the node's own connections to its peers' port, and their answers
        rules += [(cout, ["-p", "tcp", "--dport", str(port), *tag]), (cin, ["-p", "tcp", "--sport", str(port), *tag])]
    return rules


def loss_rules(ports: dict[str, int], probability: float, run_id: str) -> list[tuple[str, list[str]]]:
    """The rules that drop packets to a node's client and inter-broker ports at random. Pure."""
    if not 0 < probability < 1:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    cin, _ = chain_names(run_id)
    return [(cin, ["-p", "tcp", "--dport", str(ports[k]), "-m", "statistic", "--mode", "random",
                   "--probability", f"{probability:g}", "-m", "comment", "--comment", f"op:{run_id[:8]}:loss",
                   "-j", "DROP"]) for k in ("client", "internal")]


def bandwidth_commands(dev: str, port: int, rate_kbytes: float) -> list[list[str]]:
    """``tc`` argv that shape what leaves ``dev`` from source port ``port`` to ``rate_kbytes`` KB/s. Pure."""
    kbit = max(8, int(rate_kbytes * 8))
    return [["tc", "qdisc", "add", "dev", dev, "root", "handle", HTB, "htb", "default", "10"],
            ["tc", "class", "add", "dev", dev, "parent", HTB, "classid", f"{HTB}10", "htb", "rate", "10gbit"],
            ["tc", "class", "add", "dev", dev, "parent", HTB, "classid", f"{HTB}20", "htb", "rate", f"{kbit}kbit"],
            ["tc", "qdisc", "add", "dev", dev, "parent", f"{HTB}20", "handle", "4f51:", "tbf", "rate", f"{kbit}kbit",
             "burst", "16kb", "latency", "200ms"],
            port_filter(dev, port)]


def port_filter(dev: str, port: int) -> list[str]:
    """The ``tc`` argv that sends what leaves ``dev`` from source port ``port`` to the shaped class. Pure."""
    return ["tc", "filter", "add", "dev", dev, "parent", HTB, "protocol", "ip", "prio", "1", "u32", "match", "ip",
            "sport", str(port), "0xffff", "flowid", f"{HTB}20"]


class SshNetwork:
    """The broker nodes' network of run ``run_id``; broker ``n`` is ``inv.brokers[n - 1]``."""

    kinds = KINDS

    def __init__(self, inv: Inventory, hub: SshHub, run_id: str):
        self.inv, self.hub, self.run_id = inv, hub, run_id
        self.ports = {"client": inv.kafka.client, "internal": inv.kafka.internal, "controller": inv.kafka.controller}
        self._slow: dict[str, dict] = {}  # path -> {"name", "dev"}
        self._loss: dict = {}

    # ------------------------------------------------------------------ plumbing
    def _node(self, n: int):
        return self.inv.brokers[n - 1]

    def _remote(self, n: int):
        return self.hub.remote(self._node(n).name)

    def _ipt(self, n: int, *args: str, check: bool = True):
        done = self._remote(n).run(["iptables", "-w", *args], timeout_s=30, root=True)
        if check and done.returncode != 0:
            raise BackendError(f"[{self._node(n).name}] iptables {shlex.join(args)} failed: {done.stderr.strip()}")
        return done

    @property
    def nodes(self) -> list[int]:
        return list(range(1, len(self.inv.brokers) + 1))

    @staticmethod
    def _path_node(path: str) -> int:
        return int(path.rsplit("-", 1)[1])

    # ------------------------------------------------------------------ FaultNetwork
    def start(self) -> None:
        """Create the run's two chains on every broker node and jump to them first. Raises ``BackendError``
        naming the node and the fix (``sudo``, the iptables binary)."""
        cin, cout = chain_names(self.run_id)
        for n in self.nodes:
            for chain, hook in ((cin, "INPUT"), (cout, "OUTPUT")):
                if self._ipt(n, "-n", "-L", chain, check=False).returncode != 0:
                    self._ipt(n, "-N", chain)
                if self._ipt(n, "-C", hook, "-j", chain, check=False).returncode != 0:
                    self._ipt(n, "-I", hook, "1", "-j", chain)

    def stop(self) -> None:
        """Heal, then remove the jumps and the chains on every node (never raises for a node that is gone)."""
        self.heal()
        cin, cout = chain_names(self.run_id)
        for n in self.nodes:
            with contextlib.suppress(RemoteError, BackendError):
                for chain, hook in ((cin, "INPUT"), (cout, "OUTPUT")):
                    while self._ipt(n, "-D", hook, "-j", chain, check=False).returncode == 0:
                        pass
                    self._ipt(n, "-F", chain, check=False)
                    self._ipt(n, "-X", chain, check=False)

    def kill(self) -> None:
        self.stop()

    def describe(self) -> str:
        chains = "/".join(chain_names(self.run_id))
        return f"iptables chains {chains} and tc on {len(self.nodes)} broker node(s) over SSH"

    def client_paths(self, node: int) -> list[str]:
        return [f"client-{node}"]

    def isolation_paths(self, node: int) -> list[str]:
        return [f"client-{node}", f"internal-{node}", f"ctrl-{node}"]

    def broker_paths(self, node: int) -> list[str]:
        return [f"client-{node}", f"internal-{node}"]

    def client_address(self, node: int) -> str:
        return f"{self._node(node).address}:{self.ports['client']}"

    def cut(self, paths: list[str]) -> None:
        for p in paths:
            if p in self.cut_paths():
                continue
            for chain, match in path_rules(p, self.ports, self.run_id):
                self._ipt(self._path_node(p), "-A", chain, *match)

    def restore(self, paths: list[str]) -> None:
        for p in paths:
            n = self._path_node(p)
            for chain, match in path_rules(p, self.ports, self.run_id):
                while self._ipt(n, "-D", chain, *match, check=False).returncode == 0:
                    pass

    def cut_paths(self) -> list[str]:
        """Read back from each node's kernel (``iptables -S``), not from memory."""
        out: set[str] = set()
        for n in self.nodes:
            for chain in chain_names(self.run_id):
                done = self._ipt(n, "-S", chain, check=False)
                for m in _COMMENT.finditer(done.stdout):
                    if m.group(2) != "loss":
                        out.add(m.group(2))
        return sorted(out)

    def dropped_packets(self, node: int) -> dict[str, int]:
        """``{path or "loss": packets dropped}`` by the run's rules on ``node`` (their counters, ``-L -v -x``)."""
        out: dict[str, int] = {}
        for chain in chain_names(self.run_id):
            done = self._ipt(node, "-L", chain, "-v", "-x", "-n", check=False)
            for line in done.stdout.splitlines():
                m = re.search(r"/\* op:[0-9a-f]+:([a-z0-9-]+) \*/", line)
                fields = line.split()
                if m and fields and fields[0].isdigit():
                    out[m.group(1)] = out.get(m.group(1), 0) + int(fields[0])
        return out

    def _dev(self, n: int) -> str:
        peer = self._node(1 if n != 1 else 2).address if len(self.nodes) > 1 else "1.1.1.1"
        done = self._remote(n).run(["ip", "-o", "route", "get", peer], timeout_s=15).check()
        m = re.search(r"\bdev (\S+)", done.stdout)
        if not m:
            raise BackendError(f"[{self._node(n).name}] cannot tell the interface towards {peer}: {done.stdout}")
        return m.group(1)

    def slow(self, path: str, kind: str, attrs: dict, name: str, direction: str = "downstream",
             toxicity: float = 1.0) -> str:
        """Only ``bandwidth`` (``attrs["rate"]``, KB/s), downstream (what the node sends from the path's
        port). A second path of a node already slowed (a broker's client and inter-broker paths) joins the
        same shaped class: the rate is their sum's. Raises ``BackendError`` for another kind (no
        ``sch_netem`` here) or a root qdisc onceproof did not make."""
        if kind not in KINDS:
            raise BackendError(f"slow-network:{kind} needs netem, which the ssh backend does not use; it can "
                               "slow by bandwidth only (tc htb + tbf)")
        n = self._path_node(path)
        r = self._remote(n)
        port = self.ports["client" if path.startswith("client") else "internal"]
        same = next((s for p, s in self._slow.items() if self._path_node(p) == n), None)
        if same is not None:
            r.run(port_filter(same["dev"], port), timeout_s=15, root=True).check()
            self._slow[path] = {"name": name, "dev": same["dev"]}
            return name
        dev = self._dev(n)
        show = r.run(["tc", "qdisc", "show", "dev", dev, "root"], timeout_s=15, root=True).check().stdout
        if show.strip() and not re.match(r"qdisc (noqueue|pfifo_fast|fq_codel|mq|fq) ", show.strip()):
            raise BackendError(f"[{self._node(n).name}] {dev} already has a root qdisc ({show.strip()}); onceproof "
                               "does not replace a shaping it did not make")
        h = NodeHelper(r, self.inv.root, self.run_id)
        r.run(["sh", "-c", f'mkdir -p "{h.run_dir}/net" && cat > "{h.run_dir}/net/qdisc-{dev}.json"'],
              stdin=json.dumps({"dev": dev, "kind": "htb", "handle": HTB, "before": show.strip()}), root=True).check()
        for argv in bandwidth_commands(dev, port, float(attrs.get("rate", 64))):
            r.run(argv, timeout_s=15, root=True).check()
        self._slow[path] = {"name": name, "dev": dev}
        return name

    def slowdowns(self, path: str) -> list[str]:
        s = self._slow.get(path)
        if not s:
            return []
        out = self._remote(self._path_node(path)).run(["tc", "qdisc", "show", "dev", s["dev"]], timeout_s=15,
                                                      root=True).stdout
        return [s["name"]] if f"qdisc htb {HTB}" in out else []

    def unslow(self, path: str, name: str) -> None:
        """Remove ``path``'s slowdown: the node's qdisc once none of its paths is slowed any more (until then
        the path's port stays in the shaped class)."""
        s = self._slow.pop(path, None)
        if s and not any(self._path_node(p) == self._path_node(path) for p in self._slow):
            self._remote(self._path_node(path)).run(["tc", "qdisc", "del", "dev", s["dev"], "root"], timeout_s=15,
                                                    root=True)

    def heal(self) -> None:
        for path, s in list(self._slow.items()):
            with contextlib.suppress(RemoteError):
                self.unslow(path, s["name"])
        for n in self.nodes:
            with contextlib.suppress(RemoteError, BackendError):
                for chain in chain_names(self.run_id):
                    self._ipt(n, "-F", chain, check=False)
        self._loss = {}

    # ------------------------------------------------------------------ PacketLoss
    def loss_unavailable(self) -> str | None:
        return None

    def drop(self, node: int, probability: float) -> dict:
        rules = loss_rules(self.ports, probability, self.run_id)
        for chain, match in rules:
            self._ipt(node, "-A", chain, *match)
        self._loss = {"node": node, "probability": probability}
        return {"chain": chain_names(self.run_id)[0], "ports": [self.ports["client"], self.ports["internal"]],
                "rules": [shlex.join(["-A", c, *m]) for c, m in rules]}

    def dropped(self) -> dict:
        if not self._loss:
            return {}
        return {"dropped": self.dropped_packets(self._loss["node"]).get("loss", 0)}

    def undrop(self) -> None:
        if self._loss:
            for chain, match in loss_rules(self.ports, self._loss["probability"], self.run_id):
                while self._ipt(self._loss["node"], "-D", chain, *match, check=False).returncode == 0:
                    pass
        self._loss = {}
