"""A verdict that names the fix: for each anomaly a run found, one "likely cause → fix" line and its
source, saying only what the run's evidence supports.

Pure: it reads a result dict (``counts``, ``anomalies`` with their examples' provenance and
``nemesis_nearby``) and adds ``result["advice"] = {anomaly: {"cause", "fix", "source"}}``. The console
(``harness/summary.py``), the report (``report/html.py``) and the certificate (``report/certificate.py``)
print it. An anomaly without a rule gets no line rather than a guess.

The evidence each rule reads:

* ``duplicate``: copies of one record that name the same micro-batch (``batch`` provenance) are a
  replayed batch written again (Spark replays a batch whose ``commits/N`` is missing with the same
  batchId: the Structured Streaming Programming Guide, "foreachBatch"); copies near a driver or
  executor kill (``nemesis_nearby``) are likely that; otherwise only "written more than once".
* ``lost``: losses whose nearest fault deleted input records (``delete-input-records``) or the
  checkpoint (``lose-checkpoint``) are named after it; otherwise only the fact.
* the others name one cause each, which their definition already implies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

ISOLATION = ("Spark's Structured Streaming + Kafka Integration Guide (kafka.isolation.level); KIP-98")
FOREACH_BATCH = "Spark's Structured Streaming Programming Guide, foreachBatch (batchId for deduplication)"
KILLS = ("kill-driver", "kill-driver-in-commit-window", "kill-executor", "zombie-task", "restart-mid-txn",
         "upgrade")
"""Faults after which Spark replays a micro-batch (their names' stems, before ``:``)."""


@dataclass(frozen=True)
class Advice:
    """One line: the likely ``cause``, the ``fix`` and the ``source`` (a doc page, JIRA or KIP) behind it."""

    cause: str
    fix: str
    source: str

    def line(self) -> str:
        """``likely cause: … → fix: … (source)``."""
        return f"likely cause: {self.cause} → fix: {self.fix} ({self.source})"


def _examples(result: dict, name: str) -> list[dict]:
    return list((result.get("anomalies") or {}).get(name) or [])


def _nearby(examples: list[dict]) -> list[str]:
    """The fault names (stems) nearest each example, in order, first one per example."""
    out = []
    for ex in examples:
        for op in ex.get("nemesis_nearby") or []:
            out.append(str(op.get("f", "")).split(":")[0])
            break
    return out


LATE_PRODUCE = Advice(
    "a Produce held in the network past the producer's message.timeout.ms reached its partition leader after "
    "the transaction aborted, and the next transaction of the same producer id committed it beside the "
    "records written again: brokers before Kafka 3.6 do not verify that a transactional Produce belongs to an "
    "ongoing transaction", "run the brokers on Kafka 3.6 or later, where the leader asks the coordinator "
    "(transaction.partition.verification.enable=true, the default)",
    "KIP-890 part 1 (KAFKA-14402), Kafka 3.6; KAFKA-17754; docs/kafka17754.md")
"""The duplicates of a ``delay-txn-requests`` Produce hold (``nemesis/stale_request.py``): on a broker that
verifies, that hold leaves none (``tests/cluster/test_old_version_bug.py``)."""


def _duplicate(result: dict) -> Advice:
    exs = _examples(result, "duplicate")
    held = [str(op.get("f", "")) for ex in exs for op in (ex.get("nemesis_nearby") or [])[:1]]
    if held and all(f.startswith("delay-txn-requests:") and f.endswith("produce") for f in held):
        return LATE_PRODUCE
    same_batch = any(len({c.get("batch") for c in ex.get("copies") or [] if c.get("batch") is not None})
                     < len([c for c in ex.get("copies") or [] if c.get("batch") is not None]) for ex in exs)
    if "lose-checkpoint" in _nearby(exs):
        return Advice("the query's checkpoint was lost and the new query read its input again from "
                      "startingOffsets=earliest", "keep the checkpoint on durable storage; make the sink idempotent "
                      "on the records (a key on their identity), which survives a new query",
                      "Spark's Structured Streaming Programming Guide, Recovering from Failures with Checkpointing")
    near = [f for f in _nearby(exs) if f in KILLS]
    fix = ("make the write idempotent on the micro-batch: skip a batchId already committed (a progress row or "
           "marker committed with the data, Delta's txnAppId/txnVersion, a batch id in an Iceberg snapshot's "
           "summary), or upsert on the record's identity (a MERGE)")
    if same_batch:
        return Advice("a replayed micro-batch was written again (copies name the same batchId)", fix, FOREACH_BATCH)
    if near:
        return Advice(f"a replayed micro-batch after {near[0]} was likely written again", fix, FOREACH_BATCH)
    return Advice("the same input record was written to the output more than once", fix, FOREACH_BATCH)


DELETED = Advice("input records were deleted (DeleteRecords, as retention does) before the query read them, and "
                 "the source skipped them", "set failOnDataLoss=true so that the query stops instead of skipping, "
                 "and keep the input's retention above the pipeline's lag",
                 "Spark's Structured Streaming + Kafka Integration Guide (failOnDataLoss); KIP-107")


STOPPED_ON_LOSS = Advice("input records were deleted (DeleteRecords, as retention does) before the query read "
                         "them, and the query stopped on the loss (failOnDataLoss=true: its error is quoted "
                         "as query_stopped)", "keep the input's retention above the pipeline's lag; to go on, "
                         "decide on the loss: restart once with failOnDataLoss=false, or replay the input",
                         "Spark's Structured Streaming + Kafka Integration Guide (failOnDataLoss); KIP-107")


def _stopped(result: dict) -> str | None:
    """The quoted error of a query that stopped for good (``result["query_stopped"]``, from
    ``checking/recovery.query_failure``), if any."""
    return result.get("query_stopped") or None


def _lost(result: dict) -> Advice | None:
    near = _nearby(_examples(result, "lost"))
    if _stopped(result):  # the query stopped: its error, not the loss, is what the evidence shows
        return STOPPED_ON_LOSS if "delete-input-records" in near else None
    if result.get("verdict") == "unknown":  # recovery did not finish: a missing record may be "not yet"
        return None
    if "delete-input-records" in near:
        return DELETED
    if "lose-checkpoint" in near:
        return Advice("the query's checkpoint was lost: the new query counts batch ids from 0 again, so a sink that "
                      "skips batch ids it already committed skips new data (or the query started at "
                      "startingOffsets=latest)",
                      "keep the checkpoint on durable storage, and key the sink's idempotence to the query (its "
                      "checkpoint) or to the records, never to batch ids alone",
                      "Spark's Structured Streaming Programming Guide, Recovering from Failures with Checkpointing")
    return Advice("input records never reached the output after recovery (a batch counted as written that was not)",
                  "count a micro-batch as written only once its commit is known to have succeeded; see the first "
                  "example's nearby fault", "SPARK-28908; Flink's Kafka sink docs (transaction.timeout.ms)")


RULES: dict[str, Callable[[dict], Advice | None]] = {
    "aborted-input-read": lambda r: Advice(
        "records of input transactions that aborted are in the output: the Kafka source reads at read_uncommitted",
        "set .option(\"kafka.isolation.level\", \"read_committed\") on the Kafka source", ISOLATION),
    "duplicate": _duplicate,
    "live-duplicate": _duplicate,
    "lost": _lost,
    "lost-deleted": lambda r: STOPPED_ON_LOSS if _stopped(r) else DELETED,
    "no-recovery": lambda r: Advice(
        "the output did not catch up after the last fault" + (": the query stopped" if _stopped(r) else ""),
        "read the driver's error" + (f" ({_stopped(r)})" if _stopped(r) else " (logs/driver-<n>.log)")
        + "; a query that stops on an error the supervisor's restarts cannot clear needs its cause fixed",
        "docs/architecture.md, Anomalies (no-recovery)"),
    "unexpected": lambda r: Advice(
        "output records that are in no input record read at read_committed (altered, invented or from another "
        "topic)", "keep each record's key and seq as read; read only the input topic", "docs/pipeline-contract.md"),
    "nonmonotonic": lambda r: Advice(
        "a key's records reached the output out of their input order",
        "write each input partition's rows in offset order: no repartition or shuffle by anything but the key "
        "before the write", "docs/architecture.md, Anomalies"),
    "aborted-read": lambda r: Advice(
        "records of a sink transaction that aborted are visible at read_committed",
        "report it against the broker or the client with the run's sink.jsonl", "KIP-98"),
    "live-aborted-read": lambda r: Advice(
        "a read_committed reader saw records of a sink transaction that aborted",
        "report it against the broker or the client with the run's sink.jsonl", "KIP-98"),
    "lost-write": lambda r: Advice(
        "Kafka lost an input record it had acknowledged",
        "acks=all, min.insync.replicas ≥ 2 and unclean.leader.election.enable=false on the input topic",
        "Kafka's documentation, Replication (Availability and Durability Guarantees)"),
    "hanging-transaction": lambda r: Advice(
        "a sink transaction stayed open past transaction.timeout.ms, pinning the output's LSO",
        "abort what a dead run left open at start (init_transactions() on every transactional.id of the pool)",
        "KIP-98; Flink's KafkaSink (abort lingering transactions on restore)"),
    "leftover-transaction": lambda r: Advice(
        "a dead run's open sink transaction pinned the output's LSO after the restart",
        "abort what a dead run left open at start (init_transactions() on every transactional.id of the pool)",
        "KIP-98; Flink's KafkaSink (abort lingering transactions on restore)"),
}
"""One rule per anomaly: the result → its :class:`Advice` (``None``: nothing to say)."""


def advise(result: dict) -> dict[str, dict]:
    """``{anomaly: {"cause", "fix", "source"}}`` for every anomaly of ``result`` with a count > 0 and a rule."""
    out = {}
    for name, n in (result.get("counts") or {}).items():
        rule = RULES.get(name)
        if rule is None or not isinstance(n, (int, float)) or isinstance(n, bool) or n <= 0:
            continue
        a = rule(result)
        if a is not None:
            out[name] = asdict(a)
    return out


def attach(result: dict) -> dict:
    """``result`` with ``result["advice"]`` (:func:`advise`); returns it."""
    result["advice"] = advise(result)
    return result


def line(entry: dict) -> str:
    """One stored advice entry (``{"cause", "fix", "source"}``) as :meth:`Advice.line` prints it."""
    return Advice(**entry).line()
