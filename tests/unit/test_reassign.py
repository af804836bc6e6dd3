"""The reassignment fault's pure parts: the two plans it derives from a metadata view, the tool's JSON
document, and when a reassignment counts as complete (synthetic metadata, no cluster)."""

import threading

from onceproof.clients import reassign
from onceproof.nemesis import catalog, packages
from onceproof.nemesis.reassign import ReassignPartitions, shrink_plan

VIEW = {0: {"leader": 2, "replicas": [1, 2, 3], "isr": [1, 2, 3]},
        1: {"leader": 3, "replicas": [3, 1, 2], "isr": [3, 1]},
        2: {"leader": -1, "replicas": [2, 3, 1], "isr": []},  # no leader: left alone
        3: {"leader": 1, "replicas": [1], "isr": [1]}}  # one replica: nothing to take away


def test_the_shrink_drops_each_leader_and_the_original_puts_it_back():
    shrink, original = shrink_plan(VIEW, "output")
    assert shrink == {("output", 0): [1, 3], ("output", 1): [1, 2]}
    assert original == {("output", 0): [1, 2, 3], ("output", 1): [3, 1, 2]}


def test_the_tools_document_lists_every_partition_in_order():
    doc = reassign.plan_json({("output", 1): [1, 2], ("input", 0): [3, 1]})
    assert doc == {"version": 1, "partitions": [{"topic": "input", "partition": 0, "replicas": [3, 1]},
                                                {"topic": "output", "partition": 1, "replicas": [1, 2]}]}


def test_a_reassignment_is_done_when_the_replicas_are_the_plan_and_all_in_sync():
    plan = {("output", 0): [1, 3], ("output", 1): [1, 2]}
    during = {"output": {0: {"leader": 1, "replicas": [1, 3, 2], "isr": [1, 3, 2]},  # 2 not removed yet
                         1: {"leader": 1, "replicas": [1, 2], "isr": [1, 2]}}}
    assert reassign.pending(during, plan) == ["output:0"]
    restoring = {"output": {0: {"leader": 1, "replicas": [1, 3], "isr": [1, 3]},
                            1: {"leader": 1, "replicas": [1, 2], "isr": [1]}}}  # 2 still catching up
    assert reassign.pending(restoring, plan) == ["output:1"]
    done = {"output": {0: {"leader": 3, "replicas": [3, 1], "isr": [1, 3]},
                       1: {"leader": 2, "replicas": [1, 2], "isr": [2, 1]}}}
    assert reassign.pending(done, plan) == []
    assert reassign.pending({}, plan) == ["output:0", "output:1"]


def test_it_is_an_operator_fault_with_both_topics_in_the_package():
    assert catalog.parse("reassign-partitions:input") == ["reassign-partitions:input"]
    assert "reassign-partitions" in catalog.OPERATOR and not any(
        s.startswith("reassign-partitions") for s in catalog.all_specs())
    assert {"reassign-partitions:output", "reassign-partitions:input"} <= set(packages.specs("operator"))
    assert ReassignPartitions.target_choices == ("output", "input")


def test_wait_view_polls_until_nothing_is_left_and_calls_before_poll_each_time(monkeypatch):
    views = iter([{"output": {0: {"leader": 1}}}, {"output": {0: {"leader": 1}}}, {"output": {0: {"leader": 2}}}])
    monkeypatch.setattr(reassign.topics, "replica_view", lambda _bootstrap: next(views))
    monkeypatch.setattr(reassign.time, "sleep", lambda _s: None)
    polls: list[int] = []
    led_by_1 = lambda view, plan: [f"{t}:{p}" for t, p in plan if view[t][p]["leader"] == 1]  # noqa: E731
    took, left = reassign.wait_view("b", {("output", 0): [2, 1]}, led_by_1, 5.0,
                                    before_poll=lambda: polls.append(1))
    assert took is not None and left == [] and len(polls) == 3
    stop = threading.Event()
    stop.set()  # a stopped wait returns what was planned, not a success
    assert reassign.wait_view("b", {("output", 0): [2, 1]}, led_by_1, 5.0, stop) == (None, ["output:0"])
