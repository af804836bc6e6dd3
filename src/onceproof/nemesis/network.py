"""Network faults through the backend's :class:`onceproof.backends.base.FaultNetwork` (toxiproxy on the local
backend, ``backends/local/faultproxy.py``): ``partition`` and ``slow-network``.

``partition`` targets: ``client`` (cut clients → one broker; brokers still talk to each other) and
``isolate`` (cut every path into one broker and all its quorum links: it loses the controller and is
fenced; and its own outbound replica fetches where the network can single them out, ``out-<i>``: the local
backend's brokers in cgroups of their own, Docker's disconnected container, ssh's iptables on the node).
With 3 nodes the minority side of a split is one node, so ``isolate`` is also the minority/majority split.
``slow-network`` targets: ``latency`` (300 ms ± 100 ms), ``bandwidth`` (64 KB/s) and ``slicer`` (64-byte
slices, 1 ms apart) on one broker's client and inter-broker paths.

Evidence: a probe — a fresh client whose only bootstrap server is the target broker's address through
the fault network asks for metadata — before, during and after the fault (error or round-trip ms), the
paths cut or the slowdowns the network reports active, and, for ``isolate``, the brokers the *other*
nodes still list as registered and (``OutboundCuts``) the isolated broker's own packets to its peers that
were dropped.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka.admin import AdminClient

from onceproof.backends.base import FaultNetwork, OutboundCuts
from onceproof.kafka_config import client_config
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold


def probe(address: str, timeout_s: float = 3.0) -> dict:
    """Metadata round trip through ``address`` (``host:port``): ``{"ok": bool, "ms": float, "error"?}``."""
    a = AdminClient(client_config(address, {"socket.timeout.ms": int(timeout_s * 1000)},
                                  logger=logging.getLogger("onceproof.librdkafka.probe")))
    t = time.monotonic()
    try:
        a.list_topics(timeout=timeout_s)
        return {"ok": True, "ms": round((time.monotonic() - t) * 1000, 1)}
    except Exception as e:  # noqa: BLE001 - a failed probe is the evidence
        return {"ok": False, "ms": round((time.monotonic() - t) * 1000, 1), "error": str(e)[:120]}


def _registered_via_others(ctx: NemesisContext, node: int) -> list[int] | None:
    others = [m for m in ctx.cluster.nodes if m != node]
    a = AdminClient(client_config(",".join(ctx.network.client_address(m) for m in others),
                                  logger=logging.getLogger("onceproof.librdkafka.probe")))
    try:
        return sorted(a.list_topics(timeout=5).brokers)
    except Exception:  # noqa: BLE001
        return None


def _aim(ctx: NemesisContext, rng: random.Random, target: str | None, choices: tuple[str, ...]
         ) -> tuple[str, int, str] | Outcome:
    """``(variant, node, node's client address through the fault network)`` for a network fault, or a
    ``skipped`` Outcome."""
    if ctx.network is None:
        return Outcome(SKIPPED, evidence={"reason": "the cluster is not behind toxiproxy"})
    variant = target or rng.choice(list(choices))
    live = [n for n in ctx.cluster.nodes if ctx.cluster.state(n).alive]
    if not live:
        return Outcome(SKIPPED, variant, {"reason": "no live broker"})
    node = rng.choice(live)
    return variant, node, ctx.network.client_address(node)


@contextmanager
def toxic_on(net: FaultNetwork, paths: list[str], kind: str, attrs: dict, name: str,
             toxicity: float = 1.0, direction: str = "downstream") -> Iterator[dict[str, list[str]]]:
    """Toxic ``kind`` (``attrs``, applied to each connection with probability ``toxicity``) named ``name`` on
    each of ``paths``, in ``direction`` (``downstream``: towards the client; ``upstream``: towards the broker),
    for the ``with`` block, removed on the way out whatever happens. Yields ``{path: names of the slowdowns
    the network reports on it}`` once all are added."""
    names = []
    try:
        for p in paths:
            names.append((p, net.slow(p, kind, attrs, name=name, direction=direction, toxicity=toxicity)))
        yield {p: net.slowdowns(p) for p in paths}
    finally:
        for p, n in names:
            net.unslow(p, n)


class Partition:
    """Cut network paths of one broker for ``max(hold_s, 12)`` s, then heal."""

    name = "partition"
    target_choices = ("client", "isolate")

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return max(hold_s, 12.0) + 10.0  # the minimum cut, and the probes' timeouts

    def __init__(self, target: str | None = None, min_hold_s: float = 12.0):
        self.target, self.min_hold_s = target, min_hold_s

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        aim = _aim(ctx, rng, self.target, self.target_choices)
        if isinstance(aim, Outcome):
            return aim
        variant, node, address = aim
        net = ctx.network
        paths = net.client_paths(node) if variant == "client" else net.isolation_paths(node)
        ev = {"variant": variant, "node": node, "paths": paths, "probe_before": probe(address)}
        net.cut(paths)
        try:
            ev["disabled"] = net.cut_paths()
            ev["probe_during"] = probe(address)
            ev["held_s"] = hold(ctx, max(ctx.hold_s, self.min_hold_s))
            if variant == "isolate":
                ev["registered_seen_by_others"] = _registered_via_others(ctx, node)
                if f"out-{node}" in paths and issubclass(type(net), OutboundCuts):
                    ev["outbound_fetches"] = net.outbound_dropped(node)  # its own packets to its peers dropped
        finally:
            net.restore(paths)
        ev["probe_after"] = probe(address, timeout_s=10)
        ok = not ev["probe_during"]["ok"] and set(paths) <= set(ev["disabled"])
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{variant}: broker {node}", ev)

    def heal(self, ctx: NemesisContext) -> None:
        if ctx.network is not None:
            ctx.network.heal()


_TOXICS = {
    "latency": ("latency", {"latency": 300, "jitter": 100}),
    "bandwidth": ("bandwidth", {"rate": 64}),
    "slicer": ("slicer", {"average_size": 64, "size_variation": 32, "delay": 1000}),
}


class SlowNetwork:
    """Add a toxic to one broker's client and inter-broker paths for ``hold_s``, then remove it."""

    name = "slow-network"
    target_choices = tuple(_TOXICS)

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return hold_s + 10.0  # the toxic, and a probe through it (≤ 10 s)

    def __init__(self, target: str | None = None):
        self.target = target

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        aim = _aim(ctx, rng, self.target, self.target_choices)
        if isinstance(aim, Outcome):
            return aim
        variant, node, address = aim
        typ, attrs = _TOXICS[variant]
        net = ctx.network
        paths = net.broker_paths(node)
        ev = {"variant": variant, "node": node, "paths": paths, "toxic": {"type": typ, **attrs},
              "probe_before": probe(address)}
        with toxic_on(net, paths, typ, attrs, f"nemesis-{variant}") as ev["active"]:
            ev["probe_during"] = probe(address, timeout_s=10)
            ev["held_s"] = hold(ctx, ctx.hold_s)
        ev["probe_after"] = probe(address)
        active = all(f"nemesis-{variant}" in v for v in ev["active"].values())
        # a metadata probe is several round trips: with the toxic on it cannot take less than latency − jitter
        # (an absolute test: probe_before may itself have failed, e.g. right after a broker restart)
        slower = variant != "latency" or (ev["probe_during"]["ok"]
                                          and ev["probe_during"]["ms"] >= attrs["latency"] - attrs["jitter"])
        return Outcome(EFFECTIVE if active and slower else NOT_EFFECTIVE, f"{variant}: broker {node}", ev)

    def heal(self, ctx: NemesisContext) -> None:
        if ctx.network is not None:
            ctx.network.heal()
