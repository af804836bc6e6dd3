"""The cluster's network behind toxiproxy: one proxy per path, so every path can be cut or slowed.

Proxies (names):

* ``client-<i>``   – clients (workload, Spark's source, the sink, the checker) → broker ``i``;
* ``internal-<i>`` – other brokers' replica fetchers → broker ``i`` (the inter-broker listener);
* ``ctrl-<i>-<j>`` – node ``i`` → node ``j``'s controller (the KRaft quorum and broker heartbeats), one
  per ordered pair because each node's ``controller.quorum.voters`` names its own proxies.

Brokers advertise the ``client-`` and ``internal-`` proxy ports (``backends/local/kafka.py``), so Kafka
clients, which connect to whatever the metadata advertises, always go through them. :class:`ProxyNetwork`
is the local backend's :class:`onceproof.backends.base.FaultNetwork`; a slowdown is a toxiproxy toxic.

Packet loss (:class:`onceproof.backends.base.PacketLoss`, ``lossy-link:drop``) is iptables' ``statistic`` match
on the TCP packets to one broker's own client and inter-broker ports (the toxiproxy → broker legs), in a
chain named after the run (``backends/common/iptables.py``); :meth:`ProxyNetwork.heal`, :meth:`~ProxyNetwork.stop`
and :meth:`~ProxyNetwork.kill` remove it, and the process reaper does when the harness is SIGKILLed.

The inter-broker listener is advertised once for all peers, so ``internal-<i>`` carries every peer's
fetches *to* ``i``; broker ``i``'s own fetches from other leaders go through their proxies, shared with the
other peers. So isolating ``i`` cuts everything into ``i`` and all of ``i``'s quorum links, which fences it
(no controller heartbeat), and, when the cluster put each broker in a cgroup of its own
(``ClusterShape.own_groups``, ``backends/common/cgroups.py``), the virtual path ``out-<i>`` as well: an
iptables chain in ``OUTPUT`` dropping the TCP packets that ``i``'s processes send to the other brokers'
``internal-`` proxies (``iptables.install_cut``: the ``cgroup`` match), i.e. its outbound replica fetches.
Without the groups (no cgroup2, not root) ``out-<i>`` is not offered and isolation leaves them alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from onceproof.backends.base import BackendError
from onceproof.backends.common import iptables
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.common.toxiproxy import ToxiproxyClient, ToxiproxyServer, build_server


@dataclass
class ProxyNetwork:
    """Owns the toxiproxy server and the proxies of one cluster. Start it before the brokers. The server
    logs to ``log_path``."""

    spec: ClusterSpec
    log_path: Path
    server: ToxiproxyServer = field(default_factory=ToxiproxyServer)
    names: list[str] = field(default_factory=list)
    loss: str = ""  # the iptables chain of the packet loss in effect, "" when none
    outbound: Callable[[int], str | None] | None = None
    """Broker ``i``'s cgroup, or ``None`` when its outbound connections cannot be told apart (no ``out-<i>``)."""
    cuts: dict[int, str] = field(default_factory=dict)
    """Broker → the iptables chain cutting its outbound fetches (``out-<i>``) in effect."""

    def start(self) -> ProxyNetwork:
        """Build (cached) and start toxiproxy, then create every proxy.

        Raises: ``onceproof.backends.common.toxiproxy.ToxiproxyBuildError`` / ``ToxiproxyStartError`` with the fix.
        """
        build_server()
        self.server.start(self.log_path)
        c = self.client
        for n in self.spec.node_specs:
            self._add(c, f"client-{n.node_id}", n.client_proxy, n.client_port)
            self._add(c, f"internal-{n.node_id}", n.internal_proxy, n.internal_port)
            for j, port in n.controller_proxy:
                self._add(c, f"ctrl-{n.node_id}-{j}", port, self.spec.node(j).controller_port)
        return self

    def attach(self, api_port: int) -> ProxyNetwork:
        """Use the toxiproxy server (API on ``127.0.0.1:api_port``) and proxies that another process started for
        this cluster (a warm cluster's owner, ``harness/warm.py``) instead of starting them: :meth:`stop` and
        :meth:`kill` then leave them running, with what this network cut or dropped removed."""
        self.server = ToxiproxyServer.attached(api_port)
        self.names = [name for n in self.spec.node_specs for name in (
            f"client-{n.node_id}", f"internal-{n.node_id}", *(f"ctrl-{n.node_id}-{j}" for j, _ in n.controller_proxy))]
        return self

    @property
    def api_port(self) -> int:
        """The toxiproxy server's API port (for :meth:`attach` in another process)."""
        return self.server.port

    def _add(self, c: ToxiproxyClient, name: str, listen: int, upstream: int) -> None:
        c.create_proxy(name, f"127.0.0.1:{listen}", f"127.0.0.1:{upstream}")
        self.names.append(name)

    @property
    def client(self) -> ToxiproxyClient:
        return self.server.client

    def describe(self) -> str:
        return f"toxiproxy, {len(self.names)} proxies at {self.server.url}"

    def client_paths(self, node: int) -> list[str]:
        """Clients → ``node``."""
        return [f"client-{node}"]

    def isolation_paths(self, node: int) -> list[str]:
        """Every proxy into ``node`` and every quorum link out of it, and ``out-<node>`` (its outbound replica
        fetches) when its broker is in a cgroup of its own."""
        others = [m.node_id for m in self.spec.node_specs if m.node_id != node]
        out = [f"out-{node}"] if self.outbound is not None and self.outbound(node) else []
        return ([f"client-{node}", f"internal-{node}"] + [f"ctrl-{j}-{node}" for j in others]
                + [f"ctrl-{node}-{j}" for j in others] + out)

    def broker_paths(self, node: int) -> list[str]:
        """Data paths into ``node`` (client and inter-broker) — the ones a slow network slows."""
        return [f"client-{node}", f"internal-{node}"]

    def client_address(self, node: int) -> str:
        """``127.0.0.1:<client proxy port>`` of ``node``."""
        return f"127.0.0.1:{self.spec.node(node).client_proxy}"

    def cut(self, paths: list[str]) -> None:
        """Disable the proxies ``paths`` (``PATCH enabled=false``); an ``out-<i>`` path installs broker ``i``'s
        outbound cut (module docstring). Raises ``BackendError`` when iptables refuses it."""
        for n in paths:
            if n.startswith("out-"):
                self._cut_outbound(int(n[4:]))
            else:
                self.client.set_enabled(n, False)

    def restore(self, paths: list[str]) -> None:
        for n in paths:
            if n.startswith("out-"):
                self._restore_outbound(int(n[4:]))
            else:
                self.client.set_enabled(n, True)

    def cut_paths(self) -> list[str]:
        """Names of proxies currently cut, and the ``out-<i>`` cuts in effect."""
        return sorted([n for n, p in self.client.proxies().items() if not p.get("enabled", True)]
                      + [f"out-{i}" for i in self.cuts])

    def outbound_dropped(self, node: int) -> dict:
        """``{"seen", "dropped"}`` packets of broker ``node``'s outbound cut in effect; ``{}`` when none."""
        return iptables.counters(self.cuts[node]) if node in self.cuts else {}

    def _cut_outbound(self, node: int) -> None:
        group = self.outbound(node) if self.outbound is not None else None
        if group is None or node in self.cuts:
            return
        base = iptables.chain_name(os.environ.get("ONCEPROOF_RUN") or str(self.spec.data_dir))
        chain = f"{base}-o{node}"
        ports = [m.internal_proxy for m in self.spec.node_specs if m.node_id != node]
        self.cuts[node] = chain  # before install: a heal during a half-made install still removes it
        try:
            iptables.install_cut(chain, group, ports)
        except iptables.IptablesError as e:
            self.cuts.pop(node, None)
            raise BackendError(str(e)) from None

    def _restore_outbound(self, node: int) -> None:
        chain = self.cuts.pop(node, None)
        if chain:
            errors = iptables.remove(chain)
            if errors:
                raise BackendError(f"could not remove iptables chain {chain}: {'; '.join(errors)}")

    def slow(self, path: str, kind: str, attrs: dict, name: str, direction: str = "downstream",
             toxicity: float = 1.0) -> str:
        """Add toxic ``kind`` with ``attrs`` (toxiproxy's attributes and units) to proxy ``path`` on stream
        ``direction``, applied to each connection with probability ``toxicity``; returns the toxic's name as
        the server reports it."""
        return self.client.add_toxic(path, kind, attrs, stream=direction, name=name, toxicity=toxicity)["name"]

    def slowdowns(self, path: str) -> list[str]:
        """Names of the toxics on proxy ``path``."""
        return [t["name"] for t in self.client.toxics(path)]

    def unslow(self, path: str, name: str) -> None:
        self.client.remove_toxic(path, name)

    # -- packet loss (PacketLoss)

    def loss_unavailable(self) -> str | None:
        """``None`` when iptables can drop packets here (root, binary, kernel; probed once), else why not."""
        return iptables.unavailable()

    def drop(self, node: int, probability: float) -> dict:
        """Drop each TCP packet to ``node``'s own client and inter-broker ports with ``probability``, in the
        run's chain (:func:`iptables.chain_name` of ``$ONCEPROOF_RUN``, else of the cluster's data directory).

        Raises: ``BackendError`` naming the failed iptables command, or when a loss is already in effect;
        ``ValueError`` for a probability outside (0, 1)."""
        if self.loss:
            raise BackendError(f"a packet loss is already in effect ({self.loss}); undrop() it first")
        n = self.spec.node(node)
        ports = [n.client_port, n.internal_port]
        chain = iptables.chain_name(os.environ.get("ONCEPROOF_RUN") or str(self.spec.data_dir))
        self.loss = chain  # before install: a heal during a half-made install still removes it
        try:
            shown = iptables.install(chain, ports, probability)
        except iptables.IptablesError as e:
            self.loss = ""
            raise BackendError(str(e)) from None
        return {"chain": chain, "ports": ports, "rules": shown}

    def dropped(self) -> dict:
        """``{"seen", "dropped"}`` packets of the loss in effect; ``{}`` when none."""
        return iptables.counters(self.loss) if self.loss else {}

    def undrop(self) -> None:
        """Remove the loss's chain and its jump (safe when none)."""
        if self.loss:
            errors = iptables.remove(self.loss)
            if errors:
                raise BackendError(f"could not remove iptables chain {self.loss}: {'; '.join(errors)}")
            self.loss = ""

    def _uncut_all(self) -> None:
        for node in list(self.cuts):
            self._restore_outbound(node)

    def heal(self) -> None:
        """Remove the packet loss and the outbound cuts, re-enable every proxy and remove every toxic
        (``POST /reset``)."""
        try:
            self.undrop()
        finally:
            self._uncut_all()
        if self.server.running:
            self.client.reset()

    def stop(self) -> None:
        """Remove the packet loss and the outbound cuts, then stop the server (its proxies and toxics die
        with it)."""
        try:
            self.undrop()
            self._uncut_all()
        finally:
            self.server.stop()

    def kill(self) -> None:
        """Remove the packet loss and the outbound cuts and SIGKILL the server at once (the teardown
        watchdog's last resort)."""
        try:
            self.undrop()
            self._uncut_all()
        finally:
            self.server.kill()
