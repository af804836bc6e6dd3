"""Kafka topic I/O for the harness: create topics, read watermarks and last stable offsets, and read a
whole topic into columns for the checker.

LSO vs high watermark: ``ListOffsets`` with ``isolation_level=READ_COMMITTED`` returns the last stable
offset (LSO), with ``READ_UNCOMMITTED`` the high watermark (KIP-98). LSO < HW means a transaction is
still open on that partition.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import pandas as pd
from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

log = logging.getLogger("onceproof.topics")


class TopicError(RuntimeError):
    """A topic could not be created or read."""


def admin(bootstrap: str) -> AdminClient:
    """An AdminClient on ``bootstrap`` with librdkafka's logs kept off the console."""
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000,
                        "logger": logging.getLogger("onceproof.librdkafka.admin")})


def create_topics(bootstrap: str, specs: dict[str, int], replication: int = 3,
                  configs: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
    """Create ``{topic: partitions}`` (already existing topics are left alone).

    Raises: ``TopicError`` naming the topic that failed.
    """
    a = admin(bootstrap)
    new = [NewTopic(t, num_partitions=n, replication_factor=replication, config=configs or {})
           for t, n in specs.items()]
    for topic, fut in a.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as e:
            if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise TopicError(f"creating topic {topic!r} failed: {e}") from e
    # Wait until every partition has a leader, so the first produce does not race the metadata.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = a.list_topics(timeout=10).topics
        if all(t in md and len(md[t].partitions) == n and all(p.leader >= 0 for p in md[t].partitions.values())
               for t, n in specs.items()):
            return
        time.sleep(0.3)
    raise TopicError(f"topics {list(specs)} have no leaders after {timeout_s}s")


def partitions(bootstrap: str, topic: str) -> list[int]:
    """Partition ids of ``topic``. Raises ``TopicError`` when the topic does not exist."""
    md = admin(bootstrap).list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        raise TopicError(f"topic {topic!r} not found on {bootstrap}: check --input-topic/--output-topic")
    return sorted(md.partitions)


def end_offsets(bootstrap: str, topic: str, committed: bool) -> dict[int, int]:
    """Per partition: the LSO when ``committed`` else the high watermark (offsets, records)."""
    a = admin(bootstrap)
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions(bootstrap, topic)}
    iso = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    out = {}
    for tp, fut in a.list_offsets(req, isolation_level=iso, request_timeout=15).items():
        out[tp.partition] = fut.result(timeout=30).offset
    return out


@dataclass
class TopicRead:
    """A topic read to its end. ``frame`` columns: partition, offset, timestamp (the record's Kafka
    timestamp, epoch ms), key (str), value (bytes) and one column per header name (str); ``ends`` is the offset each partition was read to."""

    frame: pd.DataFrame
    ends: dict[int, int]
    complete: bool


def read_topic(bootstrap: str, topic: str, committed: bool = True, timeout_s: float = 120.0,
               with_headers: bool = True) -> TopicRead:
    """Read ``topic`` from the beginning up to the end offsets taken at the start of the read
    (LSO at read_committed, HW otherwise).

    ``complete`` is false when the deadline passed before every partition reached its end offset.
    """
    ends = end_offsets(bootstrap, topic, committed)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"onceproof-reader-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.max.bytes": 64 * 1024 * 1024,
                  "logger": logging.getLogger("onceproof.librdkafka.reader")})
    todo = {p for p, e in ends.items() if e > 0}
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    parts, offs, keys, vals, hdrs, tss = [], [], [], [], [], []
    deadline = time.monotonic() + timeout_s
    try:
        while todo and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=1.0):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        continue
                    raise TopicError(f"reading {topic}: {m.error()}")
                p, o = m.partition(), m.offset()
                if o >= ends[p]:
                    todo.discard(p)
                    continue
                parts.append(p); offs.append(o); tss.append(m.timestamp()[1])
                k = m.key()
                keys.append(k.decode() if k is not None else None)
                vals.append(m.value())
                if with_headers:
                    hdrs.append(m.headers())
                if o + 1 >= ends[p]:
                    todo.discard(p)
            # read_committed skips aborted records and control markers: the position tells us
            # we are past the end even when the last records were not delivered to us.
            for tp in c.position([TopicPartition(topic, p) for p in list(todo)]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
    finally:
        c.close()
    frame = pd.DataFrame({"partition": pd.array(parts, dtype="int32"),
                          "offset": pd.array(offs, dtype="int64"),
                          "timestamp": pd.array(tss, dtype="int64"),
                          "key": keys, "value": vals})
    if with_headers:
        frame = frame.join(_headers_frame(hdrs))
    return TopicRead(frame, ends, complete=not todo)


def _headers_frame(hdrs: list) -> pd.DataFrame:
    rows = [{k: (v.decode() if isinstance(v, bytes) else v) for k, v in (h or [])} for h in hdrs]
    return pd.DataFrame.from_records(rows, index=range(len(rows))) if rows else pd.DataFrame()


def decode_values(frame: pd.DataFrame) -> pd.DataFrame:
    """Parse each JSON ``value`` into columns (``key``/``seq`` at least) and drop the raw bytes.

    Fast path: the values are joined into one newline-delimited buffer and parsed by
    ``pyarrow.json`` in C++ (about 4× the per-record ``json.loads`` path in ``bench/``). If any value
    is not a one-line JSON object of consistent types, the whole frame falls back to the per-record
    path, where records whose value is not a JSON object with ``key`` and ``seq`` are kept with
    ``seq`` = NA (the checker counts them as ``unexpected``).
    """
    parsed = _decode_arrow(frame["value"]) if len(frame) else None
    if parsed is None:
        parsed = _decode_python(frame["value"])
    parsed.index = frame.index
    out = frame.drop(columns=["value"])
    if "key" in parsed:
        out["key"] = parsed["key"].astype("string").fillna(out["key"].astype("string"))
    out["seq"] = pd.to_numeric(parsed["seq"], errors="coerce").astype("Int64") if "seq" in parsed \
        else pd.array([pd.NA] * len(out), dtype="Int64")
    for col in parsed.columns:
        if col not in ("key", "seq"):
            out[col] = parsed[col]
    return out


def _decode_arrow(values: pd.Series) -> pd.DataFrame | None:
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    vals = values.tolist()
    try:
        buf = b"\n".join(vals)  # a pretty-printed (multi-line) value changes the row count: caught below
    except TypeError:  # a null value (tombstone)
        return None
    schema = pa.schema([("key", pa.string()), ("seq", pa.int64())])
    try:
        t = pj.read_json(io.BytesIO(buf),
                         parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if t.num_rows != len(vals):
        return None
    return t.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _decode_python(values: pd.Series) -> pd.DataFrame:
    def parse(v):
        try:
            d = json.loads(v)
            return d if isinstance(d, dict) else {}
        except (TypeError, ValueError):
            return {}

    return pd.DataFrame.from_records([parse(v) for v in values])
