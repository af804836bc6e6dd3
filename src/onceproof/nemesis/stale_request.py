"""``delay-txn-requests``: a transactional producer's requests held in the network past the end of their
transaction, the setting of KAFKA-17754 (found by Jepsen in its Bufstream analysis, 2024-11-12: the Kafka
transaction protocol assumes ordered delivery but sends over several connections with retries, so a delayed
commit or abort can end a *later* transaction of the same producer epoch; KIP-890 part 2, transaction version
2, bumps the epoch at every transaction end, which librdkafka does not speak yet: confluentinc/librdkafka#5423).

Targets, each on one broker's client path (clients → that broker; inter-broker traffic untouched):

* ``endtxn`` – the transaction coordinator of one of the sink's ``transactional.id`` s
  (:func:`onceproof.nemesis.targets.txn_coordinator`): it receives InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn and EndTxn;
* ``produce`` – the leader of one output partition: it receives the Produce requests.

A ``latency`` toxic (toxiproxy README, "Toxics") **upstream** (towards the broker) of :data:`DELAY_MS` ±
:data:`JITTER_MS` ms, with toxicity :data:`TOXICITY`: toxiproxy draws per connection, so about half the
connections hold every request that long while the others pass at once. A request held longer than the client
waits for it (librdkafka: ``socket.timeout.ms``, 60 s by default, for a transactional request;
``request.timeout.ms``, 30 s, for a Produce request) is timed out, its connection closed and the request sent
again on a new connection, which may be a clean one; the held copy still reaches the broker when its delay
ends, after the client moved on. The toxic stays :data:`DELAY_MS` + :data:`SETTLE_S` s, so that every held copy
arrives by its own delay, not flushed early when the toxic is removed (removal hands held data on at once).

A held EndTxn(COMMIT) of transaction T1 only does harm when it reaches the coordinator while the *next*
transaction of the same producer id and epoch is between its first AddPartitionsToTxn and its end: the
coordinator then commits that transaction half-written (transaction protocol v1). A micro-batch's produce
phase lasts a few hundred ms, so ``endtxn`` also *stretches* it around the held requests' arrival: from
:data:`STRETCH_BEFORE_S` s before the delay ends until the toxic is removed, every other broker's client path
gets a ``latency`` toxic of :data:`STRETCH_MS` ms upstream, so each Produce of the transactions then open takes
that long. (Measured first with ``experiments/kafka17754.py``: a held EndTxn(COMMIT) committed the next
transaction of a producer reused across transactions, which the application then aborted, on Kafka 4.1.1 with
librdkafka 2.16; held Produce requests did no harm there.)

Evidence: the toxic each path reports; :data:`PROBES` raw connections through the broker's client address,
each sending one Kafka ``ApiVersions`` request and timing its answer (``nemesis/lossy.py``'s request): the
held ones answer after ≥ :data:`DELAY_MS`. Effective: the toxic on every path and at least one probe held.
Exercised: a sink transaction of the hold took at least :data:`EXERCISED_MS` ms to commit, or an attempt
failed (``sink.jsonl``): a request of a live transaction was held.
"""

from __future__ import annotations

import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from onceproof.nemesis import targets
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold, sink_events
from onceproof.nemesis.lossy import api_versions_request
from onceproof.nemesis.network import probe, toxic_on

DELAY_MS = 63_000
"""Longer than librdkafka's default ``socket.timeout.ms`` (60 s), so a held EndTxn is timed out and resent."""
JITTER_MS = 2_000
TOXICITY = 0.5
SETTLE_S = 5.0
STRETCH_MS = 1_500
STRETCH_BEFORE_S = 8.0
PROBES = 6
EXERCISED_MS = 20_000
NAME = "nemesis-stale"
FAILED_ATTEMPT = ("abort", "abandon", "commit-unknown", "abort-failed", "init-error")


def answer_ms(address: str, wait_s: float) -> dict:
    """One raw TCP connection to ``address`` (``host:port``): one ``ApiVersions`` v0 request, the answer's first
    bytes awaited up to ``wait_s`` s. Returns ``{"answered": bool, "ms": float}`` (``error`` when the
    connection failed). Never raises."""
    host, _, port = address.rpartition(":")
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, int(port)), timeout=2.0) as s:
            s.sendall(api_versions_request(1, "onceproof-stale-probe"))
            s.settimeout(wait_s)
            got = s.recv(4096)
            return {"answered": bool(got), "ms": round((time.monotonic() - t0) * 1000, 1)}
    except OSError as e:
        return {"answered": False, "ms": round((time.monotonic() - t0) * 1000, 1), "error": str(e)[:80]}


def judge(ev: dict) -> bool:
    """Effective, from a turn's evidence (module docstring). Pure."""
    active = bool(ev.get("active")) and all(NAME in v for v in ev["active"].values())
    held = [p for p in ev.get("probes", []) if p.get("answered") and p["ms"] >= 0.9 * ev["delay_ms"]]
    return active and bool(held)


def exercised(events: list[dict], delay_ms: int = DELAY_MS) -> list[dict]:
    """The ``sink.jsonl`` events that show a live transaction's request held: a commit that took at least
    :data:`EXERCISED_MS` ms, or a failed attempt (``FAILED_ATTEMPT``). Pure."""
    slow = min(EXERCISED_MS, delay_ms)
    return [e for e in events if (e.get("event") == "commit" and (e.get("ms") or 0) >= slow)
            or e.get("event") in FAILED_ATTEMPT]


class DelayTxnRequests:
    """Hold about half the connections of one broker's client path :data:`DELAY_MS` ms upstream."""

    name = "delay-txn-requests"
    target_choices = ("endtxn", "produce")

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return DELAY_MS / 1000 + SETTLE_S + 10.0  # the delay, the settle, the probes before and after

    def __init__(self, target: str | None = None, delay_ms: int = DELAY_MS):
        self.target = target
        self.delay_ms = delay_ms

    def _aim(self, ctx: NemesisContext, rng: random.Random, variant: str) -> tuple[int, dict] | Outcome:
        cluster = ctx.cluster
        live = [n for n in cluster.nodes if cluster.state(n).alive]
        if variant == "endtxn":
            if not ctx.sink_ids:
                return Outcome(SKIPPED, variant, {"reason": "no sink transactional.id to aim at"})
            choice = targets.choose("txn-coordinator", cluster.bootstrap, live, rng, output_topic=ctx.output_topic,
                                    sink_ids=ctx.sink_ids)
        else:
            choice = targets.choose("leader", cluster.bootstrap, live, rng, output_topic=ctx.output_topic,
                                    sink_ids=ctx.sink_ids)
        if not choice.nodes:
            return Outcome(SKIPPED, variant, {"reason": choice.why.get("reason", "no broker to aim at"), **choice.why})
        return choice.nodes[0], choice.why

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        if ctx.network is None or ctx.cluster is None:
            return Outcome(SKIPPED, evidence={"reason": "the cluster is not behind toxiproxy"})
        variant = self.target or rng.choice(list(self.target_choices))
        aim = self._aim(ctx, rng, variant)
        if isinstance(aim, Outcome):
            return aim
        node, why = aim
        net = ctx.network
        address = net.client_address(node)
        paths = net.client_paths(node)
        jitter = min(JITTER_MS, self.delay_ms // 10)
        attrs = {"latency": self.delay_ms, "jitter": jitter}
        ev: dict = {"variant": variant, "node": node, **why, "paths": paths, "delay_ms": self.delay_ms,
                    "toxic": {"type": "latency", "direction": "upstream", "toxicity": TOXICITY, **attrs},
                    "probe_before": probe(address)}
        end_s = (self.delay_ms + jitter) / 1000 + SETTLE_S
        t0, since = time.monotonic(), time.time()
        with toxic_on(net, paths, "latency", attrs, NAME, TOXICITY, direction="upstream") as ev["active"]:
            with ThreadPoolExecutor(PROBES) as pool:  # the held probes answer when the delay ends
                probes = [pool.submit(answer_ms, address, end_s) for _ in range(PROBES)]
                if variant == "endtxn":
                    self._stretch(ctx, node, t0, end_s, ev)
                ev["probes"] = [f.result() for f in probes]
            ev["held_s"] = round(time.monotonic() - t0, 2) + hold(ctx, max(0.0, end_s - (time.monotonic() - t0)))
        ev["probe_after"] = probe(address, timeout_s=10)
        hits = exercised(sink_events(ctx.control.parent, since), self.delay_ms)
        ev["sink_events_held"] = [{k: e.get(k) for k in ("event", "batch", "partition", "txn_id", "ms", "stage",
                                                          "error_code")} for e in hits[:10]]
        effective = judge(ev)
        return Outcome(EFFECTIVE if effective else NOT_EFFECTIVE, f"{variant}: broker {node}", ev,
                       exercised=bool(hits) if effective else None)

    def _stretch(self, ctx: NemesisContext, node: int, t0: float, end_s: float, ev: dict) -> None:
        """From :data:`STRETCH_BEFORE_S` s before the delay ends until ``end_s`` (s after ``t0``), slow every
        other broker's client path by :data:`STRETCH_MS` ms upstream (module docstring)."""
        start_s = max(0.0, self.delay_ms / 1000 - STRETCH_BEFORE_S)
        hold(ctx, max(0.0, start_s - (time.monotonic() - t0)))
        if ctx.stop.is_set():
            return
        others = [p for m in ctx.cluster.nodes if m != node for p in ctx.network.client_paths(m)]
        ev["stretch"] = {"paths": others, "latency_ms": STRETCH_MS, "from_s": round(time.monotonic() - t0, 2)}
        with toxic_on(ctx.network, others, "latency", {"latency": STRETCH_MS, "jitter": 0}, f"{NAME}-stretch",
                      direction="upstream") as ev["stretch"]["active"]:
            hold(ctx, max(0.0, end_s - (time.monotonic() - t0)))

    def heal(self, ctx: NemesisContext) -> None:
        if ctx.network is not None:
            ctx.network.heal()
