"""The workload clients by the producer they send with: what ``--producer`` chooses from.

* ``transactional`` (the default): sends grouped into Kafka transactions, a resend under a bumped epoch
  aborted with its transaction, a seeded fraction aborted on purpose (``--input-aborts``) and one held
  open across several micro-batches (``workloads/transactional_client.py``), so that a pipeline reading
  its input at read_uncommitted is caught; the input then has transaction markers and aborted ranges,
  which the bundled pipeline's completeness guard counts with a second reader
  (``pipeline/input_count.py``);
* ``at-most-once``: each send tried once (``message.send.max.retries=0``), no transactions, so no
  client-side resend exists that could become visible twice, and every input offset holds a record;
* ``idempotent``: librdkafka's idempotent producer (retries under one producer id), to test the client
  itself: its resends show up as platform findings (``input-duplicate``).

Each entry names a :class:`~onceproof.workloads.keyed.KeyedWorkload` class as ``module:attribute``.
"""

from __future__ import annotations

from onceproof.registry import Registry

PRODUCERS: dict[str, str] = {
    "transactional": "onceproof.workloads.transactional_client:TransactionalWorkload",
    "at-most-once": "onceproof.workloads.keyed:AtMostOnceWorkload",
    "idempotent": "onceproof.workloads.keyed:KeyedWorkload",
}
DEFAULT = "transactional"
_REGISTRY = Registry("producer", PRODUCERS)
names = _REGISTRY.names


def client_class(name: str) -> type:
    """The workload client class that sends with producer ``name``.

    Raises: ``ValueError`` naming the known producers when ``name`` is not one of them.
    """
    return _REGISTRY.get(name)


def client(name: str, bootstrap: str, topic: str, history, *, rate: float, keys: int, seed: int,
           input_aborts: float | None = None):
    """A workload client sending with producer ``name`` (not started). ``input_aborts``: the fraction of
    its transactions aborted on purpose, for a producer that writes transactions (``aborts``); ``None``:
    that producer's default; ignored by the others, which abort nothing.

    Raises: ``ValueError`` naming the known producers when ``name`` is not one of them.
    """
    cls = client_class(name)
    extra = {"input_aborts": input_aborts} if input_aborts is not None and getattr(cls, "aborts", False) else {}
    return cls(bootstrap, topic, history, rate=rate, keys=keys, seed=seed, **extra)


def aborts(name: str, input_aborts: float) -> float:
    """The fraction of input transactions a run with producer ``name`` and ``--input-aborts input_aborts``
    aborts on purpose: ``input_aborts`` for a producer that writes transactions, else 0."""
    return input_aborts if getattr(client_class(name), "aborts", False) else 0.0
