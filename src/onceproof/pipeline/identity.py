"""Who a sink is across driver restarts: its sink id (the prefix of every ``transactional.id`` and marker
group, stored in the checkpoint), the driver incarnation, and the size of the id pool (the input topic's
partitions). Shared by the bundled pipeline (``onceproof/job.py``) and the sink library
(``pipeline/eos_sink.py``); no pyspark import.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from confluent_kafka.admin import AdminClient

from onceproof.kafka_config import client_config

SINK_ID_FILE = "onceproof-sink-id"
INCARNATION_ENV = "ONCEPROOF_DRIVER_INCARNATION"
DRIVER_CLOCK_ENV = "ONCEPROOF_DRIVER_CLOCK_ENV"
"""JSON of the variables that put the driver's JVM under libfaketime (``driver-clock-skew``): the job adds them
to its environment just before it starts the JVM (``onceproof.job.clock_env``), so the Python process itself
keeps the real clock (under libfaketime its first ``time.sleep`` failed with EINVAL)."""
SPARK_CDS_ENV = "ONCEPROOF_SPARK_CDS"
"""JSON ``{"driver": [...], "executor": [...]}`` of the JVM options that map the driver's and its executors'
class-data sharing archives (``backends/local/spark_cds.py``), read by ``onceproof.job.build_spark``."""


def default_sink_id(checkpoint: Path, prefix: str) -> str:
    """The sink id of the query whose checkpoint is ``checkpoint``: read ``<checkpoint>/onceproof-sink-id``,
    or create it as ``<prefix>-<8 random hex digits>``.

    One id per checkpoint: a restarted driver (same checkpoint) keeps its id, so its transactional ids
    fence the dead driver's producers and its markers skip what the dead driver committed; a fresh
    checkpoint gets a new id, so its batches (numbered from 0 again) are not skipped under an older
    query's markers on a reused cluster. The harness calls this before starting the driver to learn
    the ids. Creates the directory if needed. The file appears atomically with its content (written to
    a temporary file, then hard-linked into place, which fails if another process created it first: the
    first writer wins and every caller returns its id).

    Raises: ``OSError`` when the directory cannot be created or written; ``ValueError`` when the file
    exists but is empty or not one line of text.
    """
    checkpoint = Path(checkpoint)
    path = checkpoint / SINK_ID_FILE
    if not path.exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint / f".{SINK_ID_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tmp.write_text(f"{prefix}-{secrets.token_hex(4)}\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process won the race: use its id
        except OSError:  # no hard links on this file system: rename (atomic, last writer wins)
            if not path.exists():
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    sid = path.read_text().strip()
    if not sid or "\n" in sid:
        raise ValueError(f"{path}: expected one sink id, found {sid!r}")
    return sid


def driver_incarnation(env: dict | None = None) -> str:
    """This driver's incarnation number as a string: ``$ONCEPROOF_DRIVER_INCARNATION`` ("1", "2", ...,
    set by the harness's supervisor for each driver it starts), or "0" when unset or empty."""
    v = (os.environ if env is None else env).get(INCARNATION_ENV, "").strip()
    return v or "0"


def input_partitions(bootstrap: str, topic: str, timeout_s: float = 30.0) -> int:
    """Number of partitions of ``topic`` from Kafka's metadata (``AdminClient.list_topics``).

    The eos sink has one task, hence one transactional id, per input partition (Spark's Kafka source
    makes one Spark partition per Kafka partition and the map is narrow), so this is the size of the id
    pool that ``abort_leftovers`` settles at query start.

    Raises: ``RuntimeError`` when the topic does not exist or its metadata carries an error;
    ``confluent_kafka.KafkaException`` when the cluster does not answer within ``timeout_s`` seconds.
    """

    md = AdminClient(client_config(bootstrap, {"log_level": 3})).list_topics(topic, timeout=timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise RuntimeError(f"input topic {topic!r} has no partition metadata on {bootstrap}: "
                           f"{t.error if t is not None else 'not found'}")
    return len(t.partitions)
