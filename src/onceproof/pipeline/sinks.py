"""The reference pipeline's sinks and what each can take from the nemesis.

A fault that works through a sink's protocol (a Kafka transaction to time out, a transaction
coordinator to kill, a pre-commit hook to park a task in) means nothing against a sink without it: it
waits out its hold, proves nothing, and uses up the run's time (seen in the at-least-once soak: seed 6
ended ``unknown`` because ``commit-delay:precommit`` and ``commit-delay:txn-timeout`` took 155 s of its
budget). So each sink declares its capabilities, each fault its needs
(``onceproof.nemesis.catalog.sink_needs``), and ``harness/config.py`` refuses an explicit fault the sink cannot
take and leaves it out of ``--nemesis all``, saying so. Pure data: no pyspark import.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceproof.pipeline.mutants import MUTANTS

TRANSACTIONS = "transactions"
PRECOMMIT_HOOK = "precommit-hook"
DRIVER_HOOKS = "driver-hooks"
WRITE_HOLD = "write-hold"

# what a sink without the capability lacks, as a message says it
CAPABILITIES = {
    TRANSACTIONS: "Kafka transactions (KIP-98: no transaction coordinator, no transaction.timeout.ms)",
    PRECOMMIT_HOOK: "pre-commit hook (pipeline/hooks.py: between flush() and commit_transaction())",
    DRIVER_HOOKS: "after-commit hook in the driver (pipeline/hooks.py: before Spark's commits/N)",
    WRITE_HOLD: "hold of a task in the middle of its writes (pipeline/file_sink.py)",
}


@dataclass(frozen=True)
class Sink:
    """One sink of ``pipeline/job.py`` (``--sink``): its name, a one-line summary, its capabilities
    (keys of :data:`CAPABILITIES`) and the verdict a faulted run is expected to reach."""

    name: str
    summary: str
    capabilities: frozenset[str]
    expect: str  # "valid" (exactly once) or "invalid" (a weak sink or a mutant the harness must catch)
    eos: bool = False  # the transactional sink or one of its mutants (pipeline/transactional_sink.py)
    mutant: bool = False  # a deliberately broken sink (pipeline/mutants.py), never a default

    @property
    def targeted_by(self) -> str | None:
        """The fault package (``nemesis/packages.py``) aimed at this sink's flaw: a mutant's, ``process``
        for Spark's at-least-once sink (any task retry rewrites), else ``None``."""
        from onceproof.pipeline.mutants import MUTANTS

        m = MUTANTS.get(self.name)
        return m.package if m else ("process" if self.name == "at-least-once" else None)


_TXN = frozenset({TRANSACTIONS, PRECOMMIT_HOOK, DRIVER_HOOKS})
SINKS: dict[str, Sink] = {s.name: s for s in (
    Sink("eos", "the transactional sink (pipeline/transactional_sink.py)", _TXN, "valid", eos=True),
    Sink("at-least-once", "Spark's own Kafka sink (no transactions)", frozenset({DRIVER_HOOKS}), "invalid"),
    *(Sink(m.name, f"a mutant: {m.summary}", _TXN, "invalid", eos=True, mutant=True) for m in MUTANTS.values()),
    Sink("file", "Spark's file sink (JSON lines) and its _spark_metadata commit log (pipeline/file_sink.py)",
         frozenset({WRITE_HOLD}), "valid"),
)}


def get(name: str) -> Sink:
    """The sink called ``name``.

    Raises: ``ValueError`` naming the known sinks.
    """
    try:
        return SINKS[name]
    except KeyError:
        raise ValueError(f"unknown sink {name!r}; choose one of {', '.join(SINKS)}") from None
