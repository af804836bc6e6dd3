"""onceproof: a Jepsen-style harness that proves a PySpark Structured Streaming pipeline delivers every
record exactly once while its Kafka cluster, its Spark processes and its network are broken on a schedule.

Everything imports as ``onceproof.<part>``; the parts follow the data flow (see ``docs/architecture.md``):
``workloads`` (generator + client) → ``pipeline`` (the system under test) → ``sinks`` (what the job writes
and how its committed state is read) → ``checkers`` (pure verdicts), with ``nemesis`` (faults),
``backends`` (where processes run), ``store`` (the run directory), ``report`` and ``harness``
(orchestration and the CLI) around them.
"""

__version__ = "0.2.0"
