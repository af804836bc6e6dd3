"""The committed state of a sink that writes a Kafka topic: the topic at ``read_committed``.

The reader of the ``eos`` sink, its mutants and ``at-least-once`` (:class:`onceproof.sinks.base.OutputReader`).
Kafka's isolation levels give the two views (KIP-98): ``read_committed`` stops at the last stable
offset (LSO) and skips aborted transactions' records; ``read_uncommitted`` reads to the high watermark.
"""

from __future__ import annotations

from onceproof.clients import topics
from onceproof.sinks.base import OutputLocation, OutputView
from onceproof.workloads import registry as workloads


def read_output(location: OutputLocation) -> OutputView:
    """``location.topic`` read at read_uncommitted, then at read_committed, into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` decoded by ``location.workload``'s decoder
    with the provenance headers; ``uncommitted`` as ``partition``/``offset`` only, taking nothing else
    from its messages (it only tells which records read_committed hid:
    ``onceproof.checkers.transactions.hidden_aborted``). Uncommitted first, so that a record committed
    between the two reads is in both: read the other way round, it would be counted as hidden.
    ``unsettled`` says when the committed read did not reach its end offsets within
    ``location.timeout_s`` seconds. Raises ``onceproof.clients.topics.TopicError`` as ``read_topic``
    does."""
    chunk = location.chunk or topics.READ_CHUNK
    unc = topics.read_topic(location.bootstrap, location.topic, committed=False, timeout_s=location.timeout_s,
                            with_headers=False, places_only=True, chunk=chunk)
    out = topics.read_topic(location.bootstrap, location.topic, committed=True, timeout_s=location.timeout_s,
                            with_headers=True, decode=workloads.get(location.workload).decode, chunk=chunk)
    unsettled = ([] if out.complete else
                 [f"reading {location.topic} did not reach its end offsets within {location.timeout_s:.0f}s"])
    return OutputView(committed=out.frame, uncommitted=unc.frame, unsettled=unsettled)
