"""How durable the run's own topics (input, output, progress) are: named cluster configs, chosen with
``onceproof run --cluster-config``.

* ``default`` – replication factor 3 (fewer brokers: their number), the brokers' ``min.insync.replicas=2``
  and ``unclean.leader.election.enable=false`` (``backends/common/broker_config.py``): an ``acks=all`` write is
  acknowledged once every in-sync replica has it, and at least two must be in sync, so one broker may crash or
  lose its disk without losing an acknowledged record.
* ``weak-durability`` – RF 3 with the topic configs ``min.insync.replicas=1`` and
  ``unclean.leader.election.enable=true``: a leader whose followers fell out of the ISR goes on acknowledging
  alone, and when it then dies a follower that lacks those records may be elected; the records are lost
  when the old leader comes back and truncates to the new one. It takes a leader whose followers had left the
  ISR, then its loss: a single disk fault on a healthy cluster loses nothing here (``acks=all`` still waits
  for every ISR member).
* ``single-replica`` – RF 1 (and ``min.insync.replicas=1``, without which ``acks=all`` is refused): the only
  copy of each partition is on one broker, so ``corrupt-segment-tail`` on it loses the committed records it
  garbles for good. The harness must call them lost: the proof that the fault bites.

Topic configs are Kafka's (https://kafka.apache.org/documentation/#topicconfigs); a topic config overrides
the broker's default of the same name. The transaction and offset topics keep the brokers' settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Durability:
    """A cluster config: the run topics' replication factor (``None``: ``min(3, brokers)``) and topic configs."""

    name: str
    replication: int | None = None
    configs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    targeted_by: str = ""
    """The fault package (``nemesis/packages.py``) whose faults this config cannot survive: ``test-all
    --mutants`` runs the eos sink on it under that package and expects the loss caught (``""``: none)."""

    def replication_for(self, brokers: int) -> int:
        """The replication factor of the run's topics on a cluster of ``brokers``."""
        return min(self.replication or 3, brokers)


CONFIGS: dict[str, Durability] = {d.name: d for d in (
    Durability("default", summary="RF 3, min.insync.replicas=2, no unclean leader election"),
    Durability("weak-durability", configs={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
               summary="RF 3, min.insync.replicas=1, unclean.leader.election.enable=true"),
    Durability("single-replica", replication=1, configs={"min.insync.replicas": "1"},
               summary="RF 1, min.insync.replicas=1", targeted_by="disk"),
)}
DEFAULT = "default"


def names() -> list[str]:
    """Every cluster config's name, ``default`` first."""
    return list(CONFIGS)


def get(name: str) -> Durability:
    """The cluster config ``name``.

    Raises: ``ValueError`` naming the known ones."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown cluster config {name!r}; choose one of {', '.join(CONFIGS)}") from None
