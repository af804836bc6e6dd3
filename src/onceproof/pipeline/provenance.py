"""Names of the provenance headers every output record carries (docs/architecture.md, "The exactly-once sink", item 8).

Values are UTF-8 strings. The checker (``checkers/``) reads them to explain each anomaly; they are
optional for third-party pipelines checked with ``onceproof check``.
"""

BATCH = "op.batch"                  # Spark micro-batch id (``batchId``) that wrote the record
SINK_PARTITION = "op.sink_partition"  # Spark partition index of the sink task
ATTEMPT = "op.attempt"              # task attempt number (TaskContext.attemptNumber)
TXN_ID = "op.txn_id"                # Kafka transactional.id of the producer (eos only)
INPUT = "op.input"                  # "<input partition>:<input offset>" the record came from
SINK = "op.sink"                    # "eos" or "at-least-once"
INCARNATION = "op.incarnation"      # driver incarnation (ONCEPROOF_DRIVER_INCARNATION; "0" when unset)

# A sink attempt is (incarnation, batch, sink partition, attempt): Spark numbers task attempts from 0
# again in each new driver, so (batch, sink partition, attempt) alone repeats across driver restarts.
ATTEMPT_KEY = (INCARNATION, BATCH, SINK_PARTITION, ATTEMPT)

ALL = (BATCH, SINK_PARTITION, ATTEMPT, TXN_ID, INPUT, SINK, INCARNATION)
