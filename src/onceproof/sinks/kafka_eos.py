"""``--sink eos``: the exactly-once Kafka sink (``pipeline/transactional_sink.py``), and its mutants.

The job writes it inside ``foreachBatch`` (``onceproof.pipeline.eos_sink.ExactlyOnceSink``): one Kafka
transaction per (micro-batch, sink partition) with a progress marker, after settling the transactional
ids a dead run left open (docs/architecture.md, "The exactly-once sink"). The checker reads the output
topic at read_committed (``onceproof.sinks.kafka_topic``). Expected ``valid``.

Each mutant (``eos-no-marker``, ...; ``pipeline/mutants.py``) is the same sink with one deliberate flaw
(:class:`onceproof.pipeline.mutants.Flaws`), expected ``invalid`` under the fault package aimed at it.
"""

from __future__ import annotations

from onceproof import kafka_config
from onceproof.pipeline import completeness, input_count, mutants
from onceproof.pipeline.eos_sink import ExactlyOnceSink
from onceproof.pipeline.transactional_sink import SinkConfig, abort_leftovers
from onceproof.sinks.base import DRIVER_HOOKS, PRECOMMIT_HOOK, TRANSACTIONS, JobContext, Sink

READER = "onceproof.sinks.kafka_topic:read_output"
CAPABILITIES = frozenset({TRANSACTIONS, PRECOMMIT_HOOK, DRIVER_HOOKS})


def sink_config(job: JobContext) -> SinkConfig:
    """The transactional sink's configuration from the job's options, with the flaws of the sink being
    written (none unless it is a mutant)."""
    a = job.args
    flaws = mutants.flaws_of(job.sink.name)
    return SinkConfig(bootstrap=a.bootstrap, output_topic=a.output_topic, progress_topic=a.progress_topic,
                      sink_id=job.sink_id, flaws=flaws,
                      txn_timeout_ms=a.txn_timeout_ms,
                      log_path=a.sink_log, control_dir=a.control_dir, incarnation=job.incarnation,
                      security=kafka_config.to_parts(kafka_config.current()))


def write(df, job: JobContext):
    """The :class:`~onceproof.sinks.base.Writer`: abort what a dead run left open for every id of the
    pool (Flink's abort-on-restore), then :class:`ExactlyOnceSink` in ``foreachBatch``, with the
    completeness guard when the workload's rows keep their input record: against ``until - from`` rows
    when every input offset holds a record (``--input-contiguous``), else against a second reader's
    count at the source's isolation level (``pipeline/input_count.py``). Raises what ``abort_leftovers``
    raises (``SinkError``)."""
    a = job.args
    cfg = sink_config(job)
    abort_leftovers(cfg, job.pool)
    guard = None
    if job.workload.input_refs:
        counter = None if a.input_contiguous else \
            input_count.RangeCounter(a.bootstrap, mutants.source_isolation(job.sink.name))
        guard = completeness.Guard(a.checkpoint, a.input_topic, counter)
    return job.foreach_batch(df, ExactlyOnceSink(cfg, guard, job.control, input_topic=a.input_topic))


EOS = Sink("eos", "the transactional sink (pipeline/transactional_sink.py)", CAPABILITIES, "valid",
           writer=write, reader=READER, label="the transactional sink")

MUTANTS: dict[str, Sink] = {m.name: Sink(m.name, f"a mutant: {m.summary}", CAPABILITIES, "invalid", writer=write,
                                         reader=READER, label=f"the {m.name} mutant",
                                         targeted_by=m.package if m.caught else "", mutant=True)
                            for m in mutants.MUTANTS.values()}
"""The mutant sinks by name (``sinks/registry.py`` lists them all in one line). A mutant not yet caught
(:attr:`onceproof.pipeline.mutants.Mutant.caught`) names no package, so ``test-all --mutants`` leaves it out."""

USER_TOPIC = Sink("kafka", "your job's Kafka topic, read at read_committed", frozenset(), "valid", writer=None,
                  reader=READER, label="your job's Kafka topic")
"""``--pipeline-cmd ... --output kafka``: the topic a user's job writes (``sinks/user_outputs.py``)."""
