"""``delay-txn-requests`` (nemesis/stale_request.py) and the ``eos-long-lived-producer`` mutant's producer reuse
(pipeline/transactional_sink.py), on synthetic evidence and a stand-in producer factory: no cluster."""

from __future__ import annotations

import pytest

from onceproof.nemesis import catalog, packages, stale_request
from onceproof.pipeline import mutants, transactional_sink
from onceproof.pipeline.mutants import Flaws


def _ev(ms: list[float], active: bool = True, hold_s: float = 62.0) -> dict:
    act = {"client-2": [stale_request.NAME] if active else []}
    return {"hold_s": hold_s, "active": act,
            "probes": [{"ended": "open", "bytes": 14, "requests": 1, "after_ms": m} for m in ms]}


def test_effective_needs_the_toxic_on_every_path_and_a_probe_held_until_its_removal():
    assert stale_request.judge(_ev([3.1, 62_012.0]))
    assert not stale_request.judge(_ev([3.1, 4.0]))  # every probe drew a clean connection
    assert not stale_request.judge(_ev([62_012.0], active=False))
    assert not stale_request.judge({"hold_s": 62.0, "active": {}, "probes": [{"bytes": 14, "after_ms": 70_000}]})
    unanswered = _ev([])
    unanswered["probes"] = [{"ended": "open", "bytes": 0, "requests": 1, "after_ms": 72_000.0}]
    assert not stale_request.judge(unanswered)


def test_exercised_is_a_slow_commit_or_a_failed_attempt_of_the_hold():
    events = [{"event": "commit", "ms": 150}, {"event": "begin"}, {"event": "skip"}]
    assert stale_request.exercised(events, 62.0) == []
    slow = {"event": "commit", "ms": 61_200, "batch": 4, "partition": 1}
    failed = {"event": "commit-unknown", "error_code": "_TIMED_OUT"}
    assert stale_request.exercised(events + [slow, failed], 62.0) == [slow, failed]
    # a short hold lowers the bar to the hold itself
    assert stale_request.exercised([{"event": "commit", "ms": 6_000}], 5.0)


def test_the_fault_is_a_targeted_network_fault_in_its_own_package_aimed_at_the_mutant():
    assert catalog.FAULTS["delay-txn-requests"] is stale_request.DelayTxnRequests
    assert catalog.needs_proxy(["delay-txn-requests:endtxn"])
    assert not [s for s in catalog.all_specs() if s.startswith("delay-txn-requests")]  # not in --nemesis all
    assert packages.specs("stale-requests") == ["delay-txn-requests:endtxn", "delay-txn-requests:produce"]
    m = mutants.MUTANTS["eos-long-lived-producer"]
    assert (m.package, m.anomaly, m.flaws) == ("stale-requests", "duplicate", Flaws(long_lived_producer=True))
    # the coordinator's own timeout bumps the epoch: the cells keep it well past the delay
    timeout_ms = int(m.run_args[m.run_args.index("--txn-timeout-ms") + 1])
    assert timeout_ms > max(stale_request.HOLD_S.values()) * 1000 * 2
    assert stale_request.DELAY_MS > max(stale_request.HOLD_S.values()) * 1000  # the removal delivers what is held
    assert stale_request.DelayTxnRequests.expected_s("endtxn", 6.0, 30_000) >= stale_request.HOLD_S["endtxn"]


class _Made:
    """A stand-in for ``_producer`` and ``_init_transactions``: counts what it made and initialised."""

    def __init__(self):
        self.made: list[str] = []
        self.inits: list[str] = []

    def producer(self, cfg, txn_id):
        self.made.append(txn_id)
        return object()

    def init(self, cfg, prod, where):
        self.inits.append(where["txn_id"])


@pytest.mark.parametrize("long_lived", [False, True])
def test_the_correct_sink_makes_a_producer_per_attempt_and_the_mutant_reuses_one(monkeypatch, long_lived):
    made, logged = _Made(), []
    monkeypatch.setattr(transactional_sink, "_producer", made.producer)
    monkeypatch.setattr(transactional_sink, "_init_transactions", made.init)
    monkeypatch.setattr(transactional_sink, "_log", lambda cfg, event, **f: logged.append(event))
    monkeypatch.setattr(transactional_sink, "_LONG_LIVED", {})
    cfg = type("Cfg", (), {"flaws": Flaws(long_lived_producer=long_lived)})()
    where = {"txn_id": "onceproof-s-0"}
    first = transactional_sink._task_producer(cfg, "onceproof-s-0", where)
    second = transactional_sink._task_producer(cfg, "onceproof-s-0", where)
    other = transactional_sink._task_producer(cfg, "onceproof-s-1", {"txn_id": "onceproof-s-1"})
    if long_lived:
        assert first is second and other is not first
        assert made.inits == ["onceproof-s-0", "onceproof-s-1"]  # init_transactions once per id: one epoch
        assert logged == ["producer-created", "producer-reused", "producer-created"]
    else:
        assert first is not second
        assert made.inits == ["onceproof-s-0", "onceproof-s-0", "onceproof-s-1"]  # a fresh epoch per attempt
        assert logged == [] and transactional_sink._LONG_LIVED == {}


def test_endtxn_aims_at_a_coordinator_of_one_producer_in_use(monkeypatch):
    coordinators = {"s-worker-1": 1, "s-worker-2": 2, "s-worker-3": 2, "s-worker-4": -1}
    monkeypatch.setattr(stale_request.targets, "txn_coordinator", lambda bootstrap, t: (coordinators[t], 0))
    # broker 2 coordinates two producers: holding it would hold both, and the batch could not end
    assert stale_request._coordinating_one("b", list(coordinators)) == ["s-worker-1"]
    assert stale_request._coordinating_one("b", ["s-worker-2", "s-worker-3"]) == []


def test_a_transaction_kept_open_through_the_hold_pins_the_lso():
    """The exercise any pipeline shows (a user's job writes no ``sink.jsonl``): an output partition's LSO below
    its high watermark and unmoved across the hold, in samples far enough apart."""
    from onceproof.nemesis.stale_request import pinned

    first = {0: (1_000, 100, 140), 1: (1_000, 50, 50), 2: (1_000, 70, 90), 3: (1_000, 10, 20), 4: (1_000, 5, 9)}
    last = {0: (30_000, 100, 400), 1: (30_000, 50, 300), 2: (30_000, 95, 120), 4: (2_000, 5, 9)}
    # 0: still open; 1: none open; 2: moved; 3: not sampled again; 4: no sample since (the sampler held)
    assert pinned(first, last, 20_000) == [0]
    assert pinned({}, last, 20_000) == [] and pinned(first, {}, 20_000) == []


def test_an_expired_produce_is_held_past_the_sinks_message_timeout_on_every_connection():
    # the sink's message.timeout.ms is transaction.timeout.ms - 5 s (at least 1 s): the hold outlasts it by
    # the abort, the task retry and its first Produce, so the retry's transaction is open at the removal
    for txn_ms, message_s in ((15_000, 10.0), (60_000, 55.0), (4_000, 1.0)):
        assert stale_request.expired_hold_s(txn_ms) == message_s + stale_request.EXPIRED_EXTRA_S
        assert stale_request.DelayTxnRequests.expected_s("expired-produce", 6.0, txn_ms) > \
            stale_request.expired_hold_s(txn_ms)
    assert stale_request.TOXICITY["expired-produce"] == 1.0  # no clean connection for a resend to take
    assert stale_request.TOXICITY["produce"] == stale_request.TOXICITY["endtxn"] == 0.5
    assert "expired-produce" in stale_request.DelayTxnRequests.target_choices
    assert catalog.parse("delay-txn-requests:expired-produce") == ["delay-txn-requests:expired-produce"]
    f = catalog.build(["delay-txn-requests:expired-produce"], txn_timeout_ms=15_000)
    assert f["delay-txn-requests:expired-produce"].txn_timeout_ms == 15_000


def test_an_expired_produce_aims_at_an_output_leader_that_holds_no_coordinator_or_input():
    out = {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}
    inputs = {0: 1, 1: 1, 2: 2}  # broker 3 leads no input partition
    assert stale_request.quiet_leaders(out, inputs, {2}, [1, 2, 3]) == [3, 1, 2]
    assert stale_request.quiet_leaders(out, inputs, {3}, [1, 2, 3]) == [1, 2, 3]  # a coordinator goes last
    assert stale_request.quiet_leaders(out, inputs, {1}, [2]) == [2]  # only live leaders
    assert stale_request.quiet_leaders({}, inputs, set(), [1, 2, 3]) == []


def test_the_held_brokers_input_and_coordinator_leadership_is_moved_by_reordering_replicas_only():
    view = {"input": {0: {"leader": 1, "replicas": [1, 2, 3]}, 1: {"leader": 2, "replicas": [2, 3, 1]},
                      2: {"leader": 1, "replicas": [3, 1, 2]}},  # led by 1 after a kill, 3 preferred
            "__transaction_state": {4: {"leader": 1, "replicas": [1, 3, 2]}, 5: {"leader": 3, "replicas": [3, 1]}},
            "single": {0: {"leader": 1, "replicas": [1]}}}
    parts = [("input", 0), ("input", 1), ("input", 2), ("__transaction_state", 4), ("__transaction_state", 5),
             ("single", 0), ("missing", 0)]
    plan = stale_request.away_from(view, 1, parts)
    assert plan == {("input", 0): [2, 3, 1], ("input", 2): [3, 2, 1], ("__transaction_state", 4): [3, 2, 1]}
    assert all(sorted(r) == sorted(view[t][p]["replicas"]) for (t, p), r in plan.items())  # no data moves
    assert stale_request.away_from(view, 4, parts) == {}
    # until the brokers learn the election's leaders, the planned partitions still show broker 1
    assert stale_request.still_led(view, 1, plan) == ["__transaction_state:4", "input:0", "input:2"]
    moved = {"input": {0: {"leader": 2}, 2: {"leader": 1}}, "__transaction_state": {4: {"leader": 3}}}
    assert stale_request.still_led(moved, 1, plan) == ["input:2"]
    assert stale_request.still_led(moved, 1, {}) == []
