"""``topic_names``: the run's topic names (prefix "" = the names runs have always used) and the
guard that refuses any other topic."""

from __future__ import annotations

import pytest

from onceproof.topic_names import TopicGuard, TopicNameError, TopicNames


def test_the_empty_prefix_gives_todays_names():
    from onceproof.harness import runner

    n = TopicNames()
    assert (n.input, n.output, n.progress) == ("input", "output", "output-progress")
    assert runner.TOPICS == n and runner._Run.names == n  # the runner's default on local and Docker


def test_a_prefix_prefixes_every_name():
    n = TopicNames("onceproof-1a2b3c4d-")
    assert n.all() == ("onceproof-1a2b3c4d-input", "onceproof-1a2b3c4d-output", "onceproof-1a2b3c4d-output-progress")


@pytest.mark.parametrize("prefix, why", [
    ("_internal-", "may not start with '_'"), ("__", "may not start with '_'"), ("a b", "only letters"),
    ("run/1", "only letters"), ("é-", "only letters"), ("x" * 240, "exceed 249"),
])
def test_a_bad_prefix_is_refused(prefix, why):
    with pytest.raises(TopicNameError, match=why):
        TopicNames(prefix)


def test_the_guard_allows_the_runs_topics_only():
    g = TopicGuard(TopicNames("onceproof-ab-"))
    assert g.check("onceproof-ab-output") == "onceproof-ab-output"
    for other in ("input", "output", "onceproof-ab-", "onceproof-ab-input2", "onceproof-cd-input",
                  "__consumer_offsets"):
        assert not g.allows(other)
        with pytest.raises(TopicNameError, match=f"topic '{other}' is not this run's"):
            g.check(other)
    assert TopicGuard(TopicNames()).allows("output-progress")


def test_the_guard_refuses_another_topic_before_any_request():
    from onceproof.clients import topics
    names = TopicNames("onceproof-0123abcd-")
    topics.guard(TopicGuard(names))
    try:
        with pytest.raises(TopicNameError, match="'orders' is not this run's"):
            topics.create_topics("127.0.0.1:1", {names.input: 3, "orders": 3}, timeout_s=1)
        with pytest.raises(TopicNameError, match="'__consumer_offsets' is not this run's"):
            topics.delete_topics("127.0.0.1:1", [names.output, "__consumer_offsets"], timeout_s=1)
    finally:
        topics.guard(None)
    assert topics.delete_topics("127.0.0.1:1", []) == []
