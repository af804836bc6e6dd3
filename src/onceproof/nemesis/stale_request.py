"""``delay-txn-requests``: a transactional producer's requests held in the network past the end of their
transaction, the setting of KAFKA-17754 (found by Jepsen in its Bufstream analysis, 2024-11-12: the Kafka
transaction protocol assumes ordered delivery but sends over several connections with retries, so a delayed
commit or abort can end a *later* transaction of the same producer epoch; KIP-890 part 2, transaction version
2, bumps the epoch at every transaction end, which librdkafka does not speak yet: confluentinc/librdkafka#5423).

Targets, each on one broker's client path (clients → that broker; inter-broker traffic untouched):

* ``endtxn`` – the transaction coordinator (:func:`onceproof.nemesis.targets.txn_coordinator`) of a
  ``transactional.id`` the sink began a transaction with in the last :data:`RECENT_S` s (``sink.jsonl``), else
  of one of the sink's pool: it receives InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn;
* ``produce`` – the leader of one output partition: it receives the Produce requests.
* ``expired-produce`` – the same leader's client path held whole (toxicity 1) for the sink producer's
  ``message.timeout.ms`` (``transaction.timeout.ms`` − 5 s, ``pipeline/transactional_sink.py``) and
  :data:`EXPIRED_EXTRA_S` s more: the producer gives up on a record still in the network, the sink aborts the
  transaction and fails the task, and Spark's retry begins the next transaction of the same transactional.id
  before the held Produce arrives. Before KIP-890 part 1 (Kafka 3.6) the leader takes the late record as the
  start of a transaction of that producer id, and the retry's commit marker commits it: the aborted attempt's
  records become visible (``experiments/kafka17754.py`` showed it with a client alone, 4 of 5 trials on 3.5.2).
  From 3.6 the leader verifies with the coordinator (``transaction.partition.verification.enable``) and
  refuses it. The broker chosen leads an output partition and, where one does, coordinates none of the sink's
  transactional.ids in use and leads no input partition, so that the driver and the retry are not held too.

A ``latency`` toxic (toxiproxy README, "Toxics") **upstream** (towards the broker) of :data:`DELAY_MS` ms, with
toxicity :data:`TOXICITY`: toxiproxy draws per connection, so about half the connections hold every request
while the others pass at once. A request held longer than the client waits for it (librdkafka:
``socket.timeout.ms``, 60 s by default, for a transactional request; ``request.timeout.ms``, 30 s, for a
Produce request) is timed out, its connection closed and the request sent again on a new connection, which
may be a clean one. The toxic is removed :data:`HOLD_S` s after it was added (the client's timeout and 2 s),
before its delay ends: removal hands what it held on at once, so the held copies reach the broker then,
after the resend on a clean connection had its answer and the client moved on.

A held EndTxn(COMMIT) of transaction T1 only does harm when it reaches the coordinator while the *next*
transaction of the same producer id and epoch is between its first AddPartitionsToTxn and its end: the
coordinator then commits that transaction half-written (transaction protocol v1). A micro-batch's produce
phase lasts a few hundred ms, so ``endtxn`` also *stretches* it around the removal: from
:data:`STRETCH_BEFORE_S` s before it until :data:`STRETCH_AFTER_S` s after, every other broker's client path
gets a ``latency`` toxic of :data:`STRETCH_MS` ms upstream, so each Produce of the transactions then open takes
that long. (Measured first with ``experiments/kafka17754.py``, ``docs/kafka17754.md``: a held EndTxn(COMMIT)
committed the next transaction of a producer reused across transactions, which the application then aborted,
on Kafka 4.1.1 with librdkafka 2.16; held Produce requests did no harm there.)

Evidence: the toxic each path reports; :data:`PROBES` raw connections through the broker's client address,
each sending one Kafka ``ApiVersions`` request and timing its answer (``nemesis/lossy.py``'s link probe): the
held ones answer only at the removal. Effective: the toxic on every path and at least one probe held.
Exercised: a sink transaction of the hold took at least :data:`EXERCISED_MS` ms to commit, or an attempt
failed (``sink.jsonl``), or, for any pipeline (a ``--pipeline-cmd`` job writes no ``sink.jsonl``), an output
partition's LSO stayed below its high watermark, unmoved, for :data:`EXERCISED_MS` ms between the run's LSO
samples (``clients/lso_sampler.py``) taken :data:`PIN_FROM_S` s into the hold and 1 s before its end
(``lso_pinned``, :func:`pinned`): a request of a live transaction was held; or, for ``expired-produce``, whose
whole path is held (the sampler's own requests with it), records of the broker's output partitions produced
during the hold and appended at its end (``held_writes``, :func:`held_writes`).
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from confluent_kafka import Consumer, TopicPartition

from onceproof.clients import reassign, topics
from onceproof.kafka_config import client_config
from onceproof.nemesis import commit_delay, targets
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold, sink_events
from onceproof.nemesis.lossy import link_probe
from onceproof.nemesis.network import probe, toxic_on

DELAY_MS = 120_000
"""Longer than any hold: a held request reaches its broker when the toxic is removed."""
HOLD_S = {"endtxn": 63.5, "produce": 33.0}
"""Per target: librdkafka's default timeout for the request (``socket.timeout.ms`` 60 s for EndTxn,
``request.timeout.ms`` 30 s for Produce) and 3-3.5 s for the resend to be answered and, for ``endtxn``, the
micro-batch to end and the next one's transactions to begin."""
TOXICITY = {"endtxn": 0.5, "produce": 0.5, "expired-produce": 1.0}
"""Per target, the share of the broker's client connections held (toxiproxy draws per connection)."""
EXPIRED_EXTRA_S = 8.0
"""``expired-produce`` holds this long past the sink's ``message.timeout.ms``: the expiry, the abort, Spark's
task retry and its first Produce take 3-5 s, and the retry's own records (held too) must not expire before
the removal hands them on."""
STRETCH_MS = 1_500
STRETCH_BEFORE_S = 6.0
STRETCH_AFTER_S = 4.0
RECENT_S = 30.0
LEAD_WAIT_S = 15.0
"""``expired-produce`` waits up to this long (s) for the moved partitions' leadership to leave its broker."""
PROBES = 6
EXERCISED_MS = 20_000
NAME = "nemesis-stale"
FAILED_ATTEMPT = (*commit_delay.FAILED_ATTEMPT, "init-error")


def judge(ev: dict) -> bool:
    """Effective, from a turn's evidence (module docstring): the toxic on every path, and a probe answered only
    when the toxic was removed (``hold_s``). Pure."""
    active = bool(ev.get("active")) and all(NAME in v for v in ev["active"].values())
    held = [p for p in ev.get("probes", []) if p.get("bytes") and p["after_ms"] >= 0.9 * ev["hold_s"] * 1000]
    return active and bool(held)


def exercised(events: list[dict], hold_s: float) -> list[dict]:
    """The ``sink.jsonl`` events that show a live transaction's request held: a commit that took at least
    :data:`EXERCISED_MS` ms (or the hold, when shorter), or a failed attempt (``FAILED_ATTEMPT``). Pure."""
    slow = min(EXERCISED_MS, hold_s * 1000)
    return [e for e in events if (e.get("event") == "commit" and (e.get("ms") or 0) >= slow)
            or e.get("event") in FAILED_ATTEMPT]


PIN_FROM_S = 3.0
"""When, after the toxic is added, the run's newest LSO samples are first taken (its requests held by then)."""


def pinned(first: dict[int, tuple[int, int, int]], last: dict[int, tuple[int, int, int]],
           min_ms: float) -> list[int]:
    """The output partitions a transaction kept open between two samples ``{partition: (t_ms, LSO, high
    watermark)}`` at least ``min_ms`` ms apart: the LSO below the high watermark at the first and unmoved at
    the last (the LSO is the first offset of the oldest open transaction, KIP-98; it moves once that one
    ends). Pure."""
    return sorted(p for p, (t0, lso, hw) in first.items()
                  if lso < hw and p in last and last[p][1] == lso and last[p][0] - t0 >= min_ms)


def _coordinating_one(bootstrap: str, txn_ids: list[str]) -> list[str]:
    """The ids of ``txn_ids`` whose coordinator coordinates no other of them (a held coordinator path then holds
    one producer's transaction, and the micro-batch ends once its resend commits)."""
    by: dict[int, list[str]] = {}
    for t in txn_ids:
        by.setdefault(targets.txn_coordinator(bootstrap, t)[0], []).append(t)
    return sorted(ts[0] for node, ts in by.items() if node != -1 and len(ts) == 1)


def expired_hold_s(txn_timeout_ms: int) -> float:
    """How long ``expired-produce`` holds (s): the bundled sink's ``message.timeout.ms``
    (``max(1000, transaction.timeout.ms - 5000)``, ``pipeline/transactional_sink.py``) and
    :data:`EXPIRED_EXTRA_S`. Pure."""
    return max(1000, txn_timeout_ms - 5000) / 1000 + EXPIRED_EXTRA_S


def quiet_leaders(output_leaders: dict[int, int], input_leaders: dict[int, int], coordinators: set[int],
                  live: list[int]) -> list[int]:
    """The live brokers leading an output partition (``{partition: broker}``), best first: those that
    coordinate none of ``coordinators`` and lead no input partition, then those that only coordinate none,
    then the rest; ties by node id. Pure."""
    leads = sorted({n for n in output_leaders.values() if n in live})
    inputs = set(input_leaders.values())
    return sorted(leads, key=lambda n: (n in coordinators, n in inputs, n))


def held_writes(bootstrap: str, topic: str, parts: dict[int, int], from_ms: int, to_ms: int,
                timeout_s: float = 8.0) -> dict[int, int]:
    """After the removal: ``{partition: records}`` of ``topic``'s ``parts`` (``{partition: first offset}``,
    the held broker's partitions) whose timestamp (CreateTime: when the producer took them) lies in
    ``[from_ms, to_ms]`` (epoch ms, within the hold): records produced while the broker's path was held and
    appended only once it was let go, i.e. a pipeline's Produce held, whatever the pipeline (a job writes no
    ``sink.jsonl``, and the run's LSO sampler cannot read a held broker). Read at read_uncommitted (an aborted
    record counts too), for at most ``timeout_s`` s."""
    if not parts:
        return {}
    c = Consumer(client_config(bootstrap, {"group.id": "onceproof-held-writes", "enable.auto.commit": False,
                                           "isolation.level": "read_uncommitted", "enable.partition.eof": True}))
    found: dict[int, int] = {}
    try:
        c.assign([TopicPartition(topic, q, off) for q, off in parts.items()])
        left, deadline = set(parts), time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF: read to the end
                        left.discard(m.partition())
                    continue
                if from_ms <= m.timestamp()[1] <= to_ms:
                    found[m.partition()] = found.get(m.partition(), 0) + 1
    finally:
        c.close()
    return found


def away_from(view: dict[str, dict[int, dict]], node: int, partitions: list[tuple[str, int]]) -> reassign.Plan:
    """A reassignment plan that only reorders replicas: each of ``partitions`` (``(topic, partition)``) that
    ``node`` leads or prefers to lead, with ``node`` moved last, so that a preferred leader election hands
    its leadership to another replica and no data moves. ``view``: :func:`onceproof.clients.topics.replica_view`'s
    shape. Pure."""
    plan: reassign.Plan = {}
    for t, part in partitions:
        m = view.get(t, {}).get(part) or {}
        reps = list(m.get("replicas") or [])
        if len(reps) > 1 and node in reps and (reps[0] == node or m.get("leader") == node):
            plan[(t, part)] = [r for r in reps if r != node] + [node]
    return plan


def still_led(view: dict[str, dict[int, dict]], node: int, plan: reassign.Plan) -> list[str]:
    """The partitions of ``plan`` (``(topic, partition)``) that ``view``
    (:func:`onceproof.clients.topics.replica_view`'s shape) still shows led by ``node``, as
    ``"topic:partition"``. Pure."""
    return [f"{t}:{q}" for t, q in sorted(plan) if (view.get(t, {}).get(q) or {}).get("leader") == node]


def _elect_away(bootstrap: str, node: int, plan: reassign.Plan, stop, timeout_s: float = LEAD_WAIT_S
                ) -> tuple[dict[str, str], float | None, list[str]]:
    """Run a preferred leader election and poll the metadata every 0.5 s (:func:`reassign.wait_view`) until
    no partition of ``plan`` is led by ``node`` (:func:`still_led`), electing again every 3 s: the brokers
    learn a new leader from the controller asynchronously, and an election asked for just after a reorder
    can find the old order. Returns (the election's errors, seconds until no planned partition was led by
    ``node`` or None, the ones still led after ``timeout_s`` s)."""
    errors: dict[str, str] = {}
    last = -1e9

    def elect() -> None:
        nonlocal errors, last
        if time.monotonic() - last >= 3.0:
            errors = {k: v for k, v in topics.elect_preferred_leaders(bootstrap).items()
                      if v is not None and "ELECTION_NOT_NEEDED" not in v}
            last = time.monotonic()

    took, left = reassign.wait_view(bootstrap, plan, lambda view, p: still_led(view, node, p), timeout_s, stop,
                                    before_poll=elect)
    return errors, took, left


def _recent_ids(ctx: NemesisContext) -> list[str]:
    """The transactional.ids the sink began a transaction with in the last :data:`RECENT_S` s (``sink.jsonl``)."""
    return sorted({e["txn_id"] for e in sink_events(ctx.control.parent, time.time() - RECENT_S)
                   if e.get("event") == "begin" and e.get("txn_id")})


def _quiet_output_leader(ctx: NemesisContext, live: list[int], rng: random.Random) -> targets.Choice:
    """``expired-produce``'s broker: the first of :func:`quiet_leaders`, with the input topic's leadership and
    that of the sink's transactional.ids' coordinators moved off it first (:func:`away_from`, Kafka's
    reassignment tool, then a preferred leader election), so that while its path is held the driver plans
    micro-batches and Spark's task retry begins its transaction; and an output partition it still leads."""
    bootstrap = ctx.cluster.bootstrap
    out = targets.partition_leaders(bootstrap, ctx.output_topic)
    recent = _recent_ids(ctx) or list(ctx.sink_ids)
    coordinators = {targets.txn_coordinator(bootstrap, t)[0] for t in recent}
    inputs = targets.partition_leaders(bootstrap, ctx.input_topic)
    ranked = quiet_leaders(out, inputs, coordinators, live)
    if not ranked:
        return targets.Choice([], {"reason": f"no live leader for {ctx.output_topic}"})
    node = ranked[0]
    view = topics.replica_view(bootstrap)
    # every partition but the output's: the input, the coordinators, and what a job reads besides (a marker
    # topic, __consumer_offsets), so that only the output's Produce requests go to the held broker
    parts = [(t, q) for t in sorted(view) if t != ctx.output_topic for q in sorted(view[t])]
    plan = away_from(view, node, parts)
    why: dict = {"moved_off": [f"{t}:{q}" for t, q in sorted(plan)]}
    if plan:
        try:
            reassign.execute(bootstrap, plan, ctx.control / "expired-produce-reorder.json")
            took, left = reassign.wait_done(bootstrap, plan, 30.0, ctx.stop)
            why["reorder_s"], why["reorder_pending"] = took, left
            why["elected"], why["leadership_s"], why["still_led"] = _elect_away(bootstrap, node, plan, ctx.stop)
        except Exception as e:  # noqa: BLE001 - the hold still runs; the evidence says the path was not cleared
            why["reorder_error"] = repr(e)[:300]
    out = targets.partition_leaders(bootstrap, ctx.output_topic)
    led = sorted(q for q, n in out.items() if n == node)
    if not led:
        return targets.Choice([], {"reason": f"broker {node} leads no {ctx.output_topic} partition after the "
                                             "election", **why})
    inputs = targets.partition_leaders(bootstrap, ctx.input_topic)
    return targets.Choice([node], {"topic": ctx.output_topic, "partition": rng.choice(led), **why,
                                   "coordinates_sink_ids": node in {targets.txn_coordinator(bootstrap, t)[0]
                                                                    for t in recent},
                                   "leads_input": node in set(inputs.values())})


class DelayTxnRequests:
    """Hold half of one broker's client connections past librdkafka's timeouts, then let go (KAFKA-17754).

    EndTxn 63.5 s, Produce 33 s (:data:`HOLD_S`), an expired Produce the sink's message timeout and 8 s; the
    module docstring says why. ``txn_timeout_ms``: the run's ``transaction.timeout.ms`` (ms)."""

    name = "delay-txn-requests"
    target_choices = ("endtxn", "produce", "expired-produce")

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        if target == "expired-produce":
            return expired_hold_s(txn_timeout_ms) + 10.0
        return max(HOLD_S.values()) + STRETCH_AFTER_S + 10.0  # the hold, the stretch, the probes around it

    def __init__(self, target: str | None = None, txn_timeout_ms: int = 60000):
        self.target, self.txn_timeout_ms = target, txn_timeout_ms

    def _aim(self, ctx: NemesisContext, rng: random.Random, variant: str) -> tuple[int, dict] | Outcome:
        cluster = ctx.cluster
        live = [n for n in cluster.nodes if cluster.state(n).alive]
        if variant == "endtxn":
            recent = _recent_ids(ctx)
            ids = recent or ctx.sink_ids
            if not ids:
                return Outcome(SKIPPED, variant, {"reason": "no sink transactional.id to aim at"})
            alone = _coordinating_one(cluster.bootstrap, recent)  # hold one producer: the batch can then end
            choice = targets.choose("txn-coordinator", cluster.bootstrap, live, rng, output_topic=ctx.output_topic,
                                    sink_ids=alone or ids)
            choice.why["in_use"] = bool(recent)
        elif variant == "expired-produce":
            choice = _quiet_output_leader(ctx, live, rng)
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
        hold_s = expired_hold_s(self.txn_timeout_ms) if variant == "expired-produce" else HOLD_S[variant]
        toxicity = TOXICITY[variant]
        attrs = {"latency": DELAY_MS, "jitter": 0}
        ev: dict = {"variant": variant, "node": node, **why, "paths": paths, "hold_s": hold_s,
                    "toxic": {"type": "latency", "direction": "upstream", "toxicity": toxicity, **attrs},
                    "probe_before": probe(address)}
        # the held broker's output partitions' ends before the hold: what is appended after them with a
        # CreateTime inside the hold was held (held_writes)
        ends = topics.end_offsets(ctx.cluster.bootstrap, ctx.output_topic, committed=False) \
            if variant == "expired-produce" else {}
        t0, since = time.monotonic(), time.time()
        with ExitStack() as stretch, ThreadPoolExecutor(PROBES) as pool:
            with toxic_on(net, paths, "latency", attrs, NAME, toxicity, direction="upstream") as ev["active"]:
                # one ApiVersions request each, until its first answer: a held one comes at the removal
                probes = [pool.submit(link_probe, address, max_s=hold_s + 10, interval_s=3600, until_bytes=0)
                          for _ in range(PROBES)]
                hold(ctx, PIN_FROM_S)
                first = ctx.lso() if ctx.lso else {}
                if variant == "endtxn":
                    hold(ctx, max(0.0, hold_s - STRETCH_BEFORE_S - (time.monotonic() - t0)))
                    others = [p for m in ctx.cluster.nodes if m != node for p in net.client_paths(m)]
                    ev["stretch"] = {"paths": others, "latency_ms": STRETCH_MS,
                                     "from_s": round(time.monotonic() - t0, 2)}
                    ev["stretch"]["active"] = stretch.enter_context(toxic_on(
                        net, others, "latency", {"latency": STRETCH_MS, "jitter": 0}, f"{NAME}-stretch",
                        direction="upstream"))
                hold(ctx, max(0.0, hold_s - 1.0 - (time.monotonic() - t0)))
                last = ctx.lso() if ctx.lso else {}
                # a hold shorter than the mark (expired-produce's): pinned for all but the ends of the samples' span
                pin_ms = min(EXERCISED_MS, (hold_s - PIN_FROM_S - 3.0) * 1000)
                ev["lso_pinned"] = {"partitions": pinned(first, last, pin_ms), "first": first, "last": last,
                                    "min_ms": pin_ms}
                hold(ctx, max(0.0, hold_s - (time.monotonic() - t0)))
            ev["held_s"] = round(time.monotonic() - t0, 2)  # removed: the held requests go on now
            ev["probes"] = [f.result() for f in probes]
            if variant == "expired-produce":
                led = sorted(q for q, n in targets.partition_leaders(ctx.cluster.bootstrap, ctx.output_topic).items()
                             if n == node and q in ends)
                hold(ctx, 2.0)  # the held Produce requests answered
                ev["held_writes"] = held_writes(ctx.cluster.bootstrap, ctx.output_topic,
                                                {q: ends[q] for q in led}, int((since + PIN_FROM_S) * 1000),
                                                int((since + hold_s - 1.0) * 1000))
            if "stretch" in ev:
                hold(ctx, max(0.0, hold_s + STRETCH_AFTER_S - (time.monotonic() - t0)))
        ev["probe_after"] = probe(address, timeout_s=10)
        hits = exercised(sink_events(ctx.control.parent, since), hold_s)
        ev["sink_events_held"] = [{k: e.get(k) for k in ("event", "batch", "partition", "txn_id", "ms", "stage",
                                                          "error_code")} for e in hits[:10]]
        effective = judge(ev)
        return Outcome(EFFECTIVE if effective else NOT_EFFECTIVE, f"{variant}: broker {node}", ev,
                       exercised=bool(hits or ev["lso_pinned"]["partitions"] or ev.get("held_writes"))
                       if effective else None)

    def heal(self, ctx: NemesisContext) -> None:
        if ctx.network is not None:
            ctx.network.heal()
