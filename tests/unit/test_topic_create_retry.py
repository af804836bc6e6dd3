"""``topics.request``: a CreateTopics answer that says nothing of the topic (a broker handle destroyed, a cut,
a timeout) is asked again; a real refusal is not; a topic the retried request already made is taken as made.
The admin client here is synthetic (futures with Kafka's error objects): the retry rule is pure logic."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceproof.clients import topics


class Admin:
    """``create_topics`` answering each topic, call after call, with the next error of its script (None: ok)."""

    def __init__(self, script: dict[str, list[int | None]]):
        self.script, self.asked = script, []

    def create_topics(self, new, operation_timeout):
        out = {}
        for t in new:
            self.asked.append(t.topic)
            f = Future()
            code = self.script[t.topic].pop(0)
            f.set_exception(KafkaException(KafkaError(code))) if code is not None else f.set_result(None)
            out[t.topic] = f
        return out


def test_a_destroyed_broker_handle_is_asked_again_and_a_refusal_is_not(monkeypatch):
    monkeypatch.setattr(topics.time, "sleep", lambda s: None)
    a = Admin({"input": [KafkaError._DESTROY_BROKER, KafkaError.TOPIC_ALREADY_EXISTS], "output": [None]})
    topics.request(a, {"input": 6, "output": 6}, 3, {}, 30)
    assert a.asked == ["input", "output", "input"]
    a = Admin({"input": [KafkaError.POLICY_VIOLATION]})
    with pytest.raises(topics.TopicError, match="creating topic 'input' failed"):
        topics.request(a, {"input": 6}, 3, {}, 30)
    a = Admin({"input": [KafkaError._TRANSPORT]})
    with pytest.raises(topics.TopicError, match="Local: Broker transport failure"):
        topics.request(a, {"input": 6}, 3, {}, 0)  # no time left: not asked again


def test_on_a_foreign_cluster_an_existing_topic_is_refused_unless_this_call_made_it(monkeypatch):
    from onceproof.topic_names import TopicGuard

    monkeypatch.setattr(topics.time, "sleep", lambda s: None)
    monkeypatch.setattr(topics, "_guard", TopicGuard.__new__(TopicGuard))
    with pytest.raises(topics.TopicError, match="exists already on a cluster onceproof does not own"):
        topics.request(Admin({"input": [KafkaError.TOPIC_ALREADY_EXISTS]}), {"input": 6}, 3, {}, 30)
    topics.request(Admin({"input": [KafkaError._TIMED_OUT, KafkaError.TOPIC_ALREADY_EXISTS]}), {"input": 6}, 3, {}, 30)
