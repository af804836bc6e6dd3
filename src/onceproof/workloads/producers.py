"""The workload clients by the producer they send with: what ``--producer`` chooses from.

* ``at-most-once`` (the default): each send tried once (``message.send.max.retries=0``), so no
  client-side resend exists that could become visible twice, and the input stays contiguous;
* ``transactional``: sends grouped into Kafka transactions, a resend under a bumped epoch aborted with
  its transaction (``workloads/transactional_client.py``); the input then has transaction markers, so
  the bundled pipeline runs without its completeness guard (``--no-input-contiguous``);
* ``idempotent``: librdkafka's idempotent producer (retries under one producer id), to test the client
  itself: its resends show up as platform findings (``input-duplicate``).

Each entry names a :class:`~onceproof.workloads.keyed.KeyedWorkload` class as ``module:attribute``.
"""

from __future__ import annotations

from onceproof.registry import Registry

PRODUCERS: dict[str, str] = {
    "at-most-once": "onceproof.workloads.keyed:AtMostOnceWorkload",
    "transactional": "onceproof.workloads.transactional_client:TransactionalWorkload",
    "idempotent": "onceproof.workloads.keyed:KeyedWorkload",
}
DEFAULT = "at-most-once"
_REGISTRY = Registry("producer", PRODUCERS)
names = _REGISTRY.names


def client_class(name: str) -> type:
    """The workload client class that sends with producer ``name``.

    Raises: ``ValueError`` naming the known producers when ``name`` is not one of them.
    """
    return _REGISTRY.get(name)
