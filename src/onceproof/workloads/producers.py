"""The workload clients by the producer they send with: what ``--producer`` chooses from.

* ``transactional`` (the default): sends grouped into Kafka transactions, so a client-side resend is
  never visible at read_committed (``workloads/transactional_client.py`` says why);
* ``idempotent``: librdkafka's idempotent producer alone, to test the client itself: its resends show
  up as platform findings (``input-duplicate``).

Each entry names a :class:`~onceproof.workloads.keyed.KeyedWorkload` class as ``module:attribute``.
"""

from __future__ import annotations

from onceproof.registry import Registry

PRODUCERS: dict[str, str] = {
    "transactional": "onceproof.workloads.transactional_client:TransactionalWorkload",
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
