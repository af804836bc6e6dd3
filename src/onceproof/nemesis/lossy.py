"""``lossy-link``: links that lose, reset, stall or cut connections, on one broker's client and inter-broker
paths for the hold (as ``slow-network``), through the backend's :class:`onceproof.backends.base.FaultNetwork`.

Targets (toxics: toxiproxy README, "Toxics"; the statistic match: iptables-extensions(8)):

* ``reset-peer`` – toxic ``reset_peer`` (``timeout`` :data:`RESET_AFTER_MS` ms), toxicity
  :data:`RESET_TOXICITY`: about half the connections get a TCP RST that long after their first data;
* ``timeout`` – toxic ``timeout`` (:data:`TIMEOUT_MS` ms): data stops, the connection is closed after that
  long without data (toxiproxy's timer restarts on every chunk that reaches the toxic, so a connection the
  client keeps busy stays open and silent: seen in the first run, a probe sending every 0.5 s stayed open 5 s);
* ``limit-data`` – toxic ``limit_data`` (:data:`LIMIT_BYTES` bytes, towards the client): each connection is
  closed once that much has passed (more than a fetch of this workload: a batch is ~300 records of ~200 B);
* ``drop`` – random packet loss, :data:`DROP_PROBABILITY` of the TCP packets to the broker's own client and
  inter-broker ports (:class:`onceproof.backends.base.PacketLoss`; iptables on the local backend), on a
  broker that leads a partition of the output topic when one is known (:func:`busy_broker`). Without
  iptables (not root, no binary, the kernel) the turn is ``skipped`` with that reason.

netem (delay, reorder, duplicate) is not a target: ``backends/common/netem.py`` says why, and every turn's
evidence carries that reason (``netem``).

Evidence: the toxic the proxies report active (or the rules' packet counters: ``seen``, ``dropped`` > 0);
a metadata probe (``nemesis/network.py``'s) before, during and after; and a *link probe* during the hold —
raw TCP connections to the broker through its proxy sending Kafka ``ApiVersions`` requests (v0; Kafka
protocol guide, "Requests and Responses") that show what the link does to a connection: reset
(``ECONNRESET``), closed after some bytes, or silent until closed. Effective: ``reset-peer`` – toxic active
and at least one of :data:`RESET_PROBES` probe connections reset; ``timeout`` – toxic active and a probe got
no byte before its connection closed (one request, then nothing); ``limit-data`` – toxic active and a
probe's connection closed after at most :data:`LIMIT_BYTES` bytes; ``drop`` – the drop rules dropped packets.
"""

from __future__ import annotations

import errno
import random
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

from onceproof.backends.base import PacketLoss
from onceproof.backends.common import netem
from onceproof.nemesis import targets
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold
from onceproof.nemesis.network import _aim, probe, toxic_on

RESET_AFTER_MS = 500
RESET_TOXICITY = 0.5
RESET_PROBES = 8
TIMEOUT_MS = 3000
LIMIT_BYTES = 256 * 1024
DROP_PROBABILITY = 0.1
NAME = "nemesis-lossy"

TOXICS = {
    "reset-peer": ("reset_peer", {"timeout": RESET_AFTER_MS}, RESET_TOXICITY),
    "timeout": ("timeout", {"timeout": TIMEOUT_MS}, 1.0),
    "limit-data": ("limit_data", {"bytes": LIMIT_BYTES}, 1.0),
}


def api_versions_request(correlation_id: int, client_id: str = "onceproof-link-probe") -> bytes:
    """A Kafka ``ApiVersions`` v0 request with its size prefix: ``int32 size, int16 api_key=18, int16
    api_version=0, int32 correlation_id, string client_id`` (request header v1, empty body)."""
    cid = client_id.encode()
    body = struct.pack(">hhih", 18, 0, correlation_id, len(cid)) + cid
    return struct.pack(">i", len(body)) + body


def link_probe(address: str, *, max_s: float, interval_s: float = 0.05, batch: int = 1,
               until_bytes: int | None = None) -> dict:
    """One raw TCP connection to ``address`` (``host:port``) sending ``batch`` ``ApiVersions`` requests every
    ``interval_s`` s for up to ``max_s`` s (or until ``until_bytes`` bytes came back), reading the answers.

    Returns ``{"ended": "reset" | "closed" | "refused" | "open", "bytes": received, "requests": sent,
    "after_ms": when it ended (or ``max_s``)}``: ``reset`` = ``ECONNRESET``, ``closed`` = the peer closed
    (end of stream), ``open`` = still open at the end. Never raises."""
    host, _, port = address.rpartition(":")
    t0 = time.monotonic()
    got = sent = 0
    ended = "open"
    try:
        s = socket.create_connection((host, int(port)), timeout=2.0)
    except OSError as e:
        return {"ended": "refused", "bytes": 0, "requests": 0, "after_ms": _ms(t0), "error": str(e)[:80]}
    with s:
        s.settimeout(min(interval_s, 0.1))
        next_send = t0
        while time.monotonic() - t0 < max_s and (until_bytes is None or got <= until_bytes):
            try:
                if time.monotonic() >= next_send:
                    s.sendall(b"".join(api_versions_request(sent + i) for i in range(batch)))
                    sent += batch
                    next_send = time.monotonic() + interval_s
                chunk = s.recv(65536)
                if not chunk:
                    ended = "closed"
                    break
                got += len(chunk)
            except TimeoutError:
                continue
            except OSError as e:  # ECONNRESET: an RST; EPIPE: written after the peer closed
                ended = "reset" if isinstance(e, ConnectionResetError) or e.errno == errno.ECONNRESET else "closed"
                break
    return {"ended": ended, "bytes": got, "requests": sent, "after_ms": _ms(t0)}


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


def judge(variant: str, ev: dict) -> bool:
    """Did the turn take effect, from its evidence (module docstring)? Pure."""
    if variant == "drop":
        return bool((ev.get("counters_during") or {}).get("dropped"))
    active = bool(ev.get("active")) and all(NAME in v for v in ev["active"].values())
    links = ev.get("link_probes") or []
    if variant == "reset-peer":
        return active and any(p["ended"] == "reset" for p in links)
    if variant == "timeout":
        return active and any(p["ended"] in ("closed", "reset") and p["bytes"] == 0 for p in links)
    if variant == "limit-data":
        return active and any(p["ended"] in ("closed", "reset") and 0 < p["bytes"] <= LIMIT_BYTES for p in links)
    raise ValueError(f"unknown lossy-link target {variant!r}; choose from {', '.join(LossyLink.target_choices)}")


def _link_probes(variant: str, address: str) -> list[dict]:
    if variant == "reset-peer":  # each connection draws the toxic with RESET_TOXICITY: several at once
        with ThreadPoolExecutor(RESET_PROBES) as pool:
            return list(pool.map(lambda _: link_probe(address, max_s=RESET_AFTER_MS / 1000 + 1.5, interval_s=0.1),
                                 range(RESET_PROBES)))
    if variant == "timeout":  # one request, then silence: each chunk of data restarts the toxic's timer
        return [link_probe(address, max_s=TIMEOUT_MS / 1000 + 2.0, interval_s=3600)]
    # limit-data: pipelined requests until the link closes past LIMIT_BYTES (each answer is a few hundred B)
    return [link_probe(address, max_s=5.0, interval_s=0.01, batch=50, until_bytes=LIMIT_BYTES)]


def busy_broker(ctx: NemesisContext, rng: random.Random, node: int) -> tuple[int, dict]:
    """The broker whose packets ``drop`` loses, and why: a live leader of a partition of the run's output
    topic (``targets.choose("leader")``), where the sink's writes and the reads of it arrive, else ``node``
    (the one drawn at random). A broker that leads nothing (one just restarted, before Kafka's preferred
    leader election moves leaders back, ``leader.imbalance.check.interval.seconds``) gets almost no packets
    on its ports, so a drop there would drop nothing and prove nothing."""
    live = [n for n in ctx.cluster.nodes if ctx.cluster.state(n).alive]
    try:
        choice = targets.choose("leader", ctx.cluster.bootstrap, live, rng, output_topic=ctx.output_topic,
                                sink_ids=ctx.sink_ids)
    except Exception as e:  # librdkafka's KafkaException, a cluster mid-fault: the random one will do
        return node, {"target": "random", "reason": f"leaders unknown ({type(e).__name__}: {e})"}
    if choice.nodes:
        return choice.nodes[0], {"target": "leader", **choice.why}
    return node, {"target": "random", **choice.why}


class LossyLink:
    """Reset, stall, cut or drop the packets of one broker's client and inter-broker paths for ``hold_s``."""

    name = "lossy-link"
    target_choices = ("reset-peer", "timeout", "limit-data", "drop")

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return hold_s + 10.0  # the hold, and the probes around it (≤ 10 s)

    def __init__(self, target: str | None = None):
        self.target = target

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        aim = _aim(ctx, rng, self.target, self.target_choices)
        if isinstance(aim, Outcome):
            return aim
        variant, node, address = aim
        if variant == "drop":
            node, aim_why = busy_broker(ctx, rng, node)
            return self._drop(ctx, node, ctx.network.client_address(node), aim_why)
        typ, attrs, toxicity = TOXICS[variant]
        net = ctx.network
        paths = net.broker_paths(node)
        ev = {"variant": variant, "node": node, "paths": paths,
              "toxic": {"type": typ, "toxicity": toxicity, **attrs}, "netem": netem.unavailable(),
              "probe_before": probe(address)}
        t0 = time.monotonic()
        with toxic_on(net, paths, typ, attrs, NAME, toxicity) as ev["active"]:
            ev["link_probes"] = _link_probes(variant, address)
            ev["probe_during"] = probe(address)
            ev["held_s"] = round(time.monotonic() - t0, 2) + hold(ctx, max(0.0, ctx.hold_s - (time.monotonic() - t0)))
        ev["probe_after"] = probe(address, timeout_s=10)
        return Outcome(EFFECTIVE if judge(variant, ev) else NOT_EFFECTIVE, f"{variant}: broker {node}", ev)

    def _drop(self, ctx: NemesisContext, node: int, address: str, aim: dict) -> Outcome:
        net = ctx.network
        if not isinstance(net, PacketLoss):
            return Outcome(SKIPPED, f"drop: broker {node}", {"reason": "this backend's fault network cannot drop "
                                                                       "packets"})
        why = net.loss_unavailable()
        if why:
            return Outcome(SKIPPED, f"drop: broker {node}", {"reason": why, "netem": netem.unavailable()})
        ev = {"variant": "drop", "node": node, "aim": aim, "probability": DROP_PROBABILITY,
              "netem": netem.unavailable(), "probe_before": probe(address)}
        try:
            ev.update(net.drop(node, DROP_PROBABILITY))
            ev["counters_start"] = net.dropped()
            ev["probe_during"] = probe(address, timeout_s=10)
            ev["held_s"] = hold(ctx, ctx.hold_s)
            ev["counters_during"] = net.dropped()
        finally:
            net.undrop()
        ev["probe_after"] = probe(address)
        c = ev["counters_during"]
        ev["loss_ratio"] = round(c["dropped"] / c["seen"], 3) if c.get("seen") else None
        return Outcome(EFFECTIVE if judge("drop", ev) else NOT_EFFECTIVE, f"drop: broker {node}", ev)

    def heal(self, ctx: NemesisContext) -> None:
        if ctx.network is not None:
            ctx.network.heal()
