"""The sinks by name: what ``--sink`` chooses from (``sinks/base.py`` says what an entry owns).

Each line names the entry as ``module:attribute``, imported only when asked for (listing the names for
``--help`` costs no import); an attribute that is a mapping holds several entries by name (the
mutants). A new sink is one module and one line here.
"""

from __future__ import annotations

from onceproof.pipeline.mutants import MUTANTS
from onceproof.registry import Registry
from onceproof.sinks.base import Sink

SINKS: dict[str, str] = {
    "eos": "onceproof.sinks.kafka_eos:EOS",
    "at-least-once": "onceproof.sinks.kafka_at_least_once:AT_LEAST_ONCE",
    **dict.fromkeys(MUTANTS, "onceproof.sinks.kafka_eos:MUTANTS"),
    "file": "onceproof.sinks.files:FILE",
    "postgres": "onceproof.sinks.postgres:POSTGRES",
    "postgres-autocommit": "onceproof.sinks.postgres:AUTOCOMMIT",
    "delta": "onceproof.sinks.delta:DELTA",
    "delta-foreachbatch": "onceproof.sinks.delta:DELTA_FOREACHBATCH",
    "delta-no-txn": "onceproof.sinks.delta:DELTA_NO_TXN",
    "iceberg": "onceproof.sinks.iceberg:ICEBERG",
    "iceberg-foreachbatch": "onceproof.sinks.iceberg:ICEBERG_FOREACHBATCH",
    "iceberg-no-idempotence": "onceproof.sinks.iceberg:ICEBERG_NO_IDEMPOTENCE",
}
DEFAULT = "eos"
"""The default sink, and the control that ``test-all --mutants`` runs against every package it uses."""
_REGISTRY = Registry("sink", SINKS)
names = _REGISTRY.names


def get(name: str) -> Sink:
    """The sink called ``name``.

    Raises: ``ValueError`` naming the known sinks when ``name`` is not one of them.
    """
    return _REGISTRY.get(name)


def find(name: object) -> Sink | None:
    """The sink called ``name``, or ``None`` for a name no sink has (e.g. a run's ``test.json`` without
    one)."""
    return get(name) if isinstance(name, str) and name in SINKS else None


def entries() -> list[Sink]:
    """Every sink, in registration order (imports them all)."""
    return [get(n) for n in SINKS]
