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

import numpy as np
import pandas as pd
from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from onceproof.kafka_config import client_config
from onceproof.store.columns import Chunks, release_freed_memory
from onceproof.topic_names import TopicGuard

log = logging.getLogger("onceproof.topics")


class TopicError(RuntimeError):
    """A topic could not be created or read."""


_guard: TopicGuard | None = None


def guard(g: TopicGuard | None) -> None:
    """Set (or clear, ``None``) the process-wide guard :func:`create_topics` and :func:`delete_topics`
    consult: on a cluster onceproof does not own, the run may create and delete only its own topics, and a
    topic of that name that already exists is not its own. The runner sets it once per run."""
    global _guard
    _guard = g


def admin(bootstrap: str) -> AdminClient:
    """An AdminClient on ``bootstrap`` with librdkafka's logs kept off the console."""
    return AdminClient(client_config(bootstrap, {"socket.timeout.ms": 10000},
                                     logger=logging.getLogger("onceproof.librdkafka.admin")))


def create_topics(bootstrap: str, specs: dict[str, int], replication: int = 3,
                  configs: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
    """Create ``{topic: partitions}`` (already existing topics are left alone, unless a :func:`guard` is
    set: then each name must be the run's and must not exist yet).

    Raises: ``TopicError`` naming the topic that failed; ``TopicNameError`` for a name the guard refuses.
    """
    for t in specs:
        if _guard is not None:
            _guard.check(t)
    a = admin(bootstrap)
    request(a, specs, replication, configs or {}, timeout_s)
    # Wait until every partition has a leader, so the first produce does not race the metadata.
    wait_for_leaders(bootstrap, specs, timeout_s, a)


TRANSIENT = frozenset({"_DESTROY_BROKER", "_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "REQUEST_TIMED_OUT",
                       "NOT_CONTROLLER"})
"""CreateTopics errors that say nothing of the topic, only of the request's way there, asked again: librdkafka
fails a request in flight on a bootstrap broker's handle that it destroys once metadata names the brokers
(``_DESTROY_BROKER``, "Broker handle destroyed without termination", seen at a run's start on Kafka 3.5.2), a
connection cut, a timeout, a controller that moved."""


def request(a: AdminClient, specs: dict[str, int], replication: int, configs: dict[str, str],
            timeout_s: float) -> None:
    """CreateTopics for ``{topic: partitions}`` through ``a``, each topic whose answer is a :data:`TRANSIENT`
    or retriable error asked again (1 s apart) until ``timeout_s`` s have passed. A topic that exists
    already is left alone, unless the :func:`guard` is set and no earlier attempt of this call may have
    created it.

    Raises: ``TopicError`` naming the topic and Kafka's error."""
    deadline = time.monotonic() + timeout_s
    pending, asked = dict(specs), set()
    while pending:
        new = [NewTopic(t, num_partitions=n, replication_factor=replication, config=configs)
               for t, n in pending.items()]
        again = {}
        for topic, fut in a.create_topics(new, operation_timeout=timeout_s).items():
            try:
                fut.result(timeout=timeout_s)
            except KafkaException as e:
                err = e.args[0]
                if err.name() == "TOPIC_ALREADY_EXISTS":
                    if _guard is not None and topic not in asked:
                        raise TopicError(f"topic {topic!r} exists already on a cluster onceproof does not own: it "
                                         "is not this run's; choose another [kafka] topic_prefix") from e
                    continue
                if (err.retriable() or err.name() in TRANSIENT) and time.monotonic() < deadline:
                    log.warning("creating topic %r: %s; asking again", topic, err.str())
                    again[topic] = pending[topic]
                    continue
                raise TopicError(f"creating topic {topic!r} failed: {e}") from e
        asked |= set(again)
        pending = again
        if pending:
            time.sleep(1.0)


def delete_topics(bootstrap: str, names: list[str] | tuple[str, ...], timeout_s: float = 60.0) -> list[str]:
    """Delete ``names`` (each checked by the :func:`guard` when one is set); a topic that does not exist is
    skipped. Returns the names deleted.

    Raises: ``TopicError`` naming the topic that failed; ``TopicNameError`` for a name the guard refuses.
    """
    for t in names:
        if _guard is not None:
            _guard.check(t)
    if not names:
        return []
    deleted = []
    a = admin(bootstrap)  # held until every future resolved: a collected client fails them (_DESTROY)
    for topic, fut in a.delete_topics(list(names), operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
            deleted.append(topic)
        except KafkaException as e:
            if e.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise TopicError(f"deleting topic {topic!r} failed: {e}") from e
    return deleted


def wait_for_leaders(bootstrap: str, specs: dict[str, int], timeout_s: float, a: AdminClient | None = None) -> None:
    """Wait until each topic of ``specs`` (``{topic: partitions}``) has that many partitions, each with a
    leader. Raises: ``TopicError`` after ``timeout_s`` s."""
    a = a or admin(bootstrap)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = a.list_topics(timeout=10).topics
        if all(t in md and len(md[t].partitions) == n and all(p.leader >= 0 for p in md[t].partitions.values())
               for t, n in specs.items()):
            return
        time.sleep(0.3)
    raise TopicError(f"topics {list(specs)} have no leaders after {timeout_s}s")


def replica_view(bootstrap: str, timeout_s: float = 10.0) -> dict[str, dict[int, dict]]:
    """Every topic's partitions (internal topics included) from cluster metadata:
    ``{topic: {partition: {"leader": node id (-1: none), "replicas": [ids], "isr": [ids]}}}``.

    Raises: ``KafkaException`` when no broker answered."""
    md = admin(bootstrap).list_topics(timeout=timeout_s)
    return {t: {p: {"leader": m.leader, "replicas": list(m.replicas), "isr": list(m.isrs)}
                for p, m in tm.partitions.items()}
            for t, tm in md.topics.items() if tm.error is None}


def elect_preferred_leaders(bootstrap: str, timeout_s: float = 30.0) -> dict[str, str | None]:
    """Preferred leader election on every partition (KIP-460, ``ElectLeaders`` with ``PREFERRED``):
    ``{"topic:partition": None (elected) or the broker's error}``; ``ELECTION_NOT_NEEDED`` for a
    partition already led by its preferred replica. Unclean election is never asked for.

    Raises: ``KafkaException`` when the request failed as a whole."""
    from confluent_kafka import ElectionType

    a = admin(bootstrap)  # kept until the answer: a collected client fails its futures (_DESTROY)
    fut = a.elect_leaders(ElectionType.PREFERRED, None)  # confluent-kafka 2.x rejects its request_timeout
    # keyword here ("more argument specifiers than keyword list entries")
    return {f"{tp.topic}:{tp.partition}": (None if err is None else str(err))
            for tp, err in fut.result(timeout=timeout_s + 5).items()}


def add_partitions(bootstrap: str, topic: str, total: int, timeout_s: float = 30.0) -> None:
    """Grow ``topic`` to ``total`` partitions (``CreatePartitions``, KIP-195; a topic never shrinks) and
    wait until each has a leader.

    Raises: ``KafkaException`` when the request failed (e.g. ``total`` not above the current count);
    ``TopicError`` when the new partitions have no leader within ``timeout_s`` s."""
    a = admin(bootstrap)  # kept until the answer (a collected client fails its futures)
    for fut in a.create_partitions([NewPartitions(topic, total)], request_timeout=timeout_s).values():
        fut.result(timeout=timeout_s + 5)
    wait_for_leaders(bootstrap, {topic: total}, timeout_s, a)


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


def start_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Per partition: the log start offset (the earliest offset a reader can fetch)."""
    a = admin(bootstrap)
    req = {TopicPartition(topic, p): OffsetSpec.earliest() for p in partitions(bootstrap, topic)}
    return {tp.partition: fut.result(timeout=30).offset
            for tp, fut in a.list_offsets(req, request_timeout=15).items()}


def delete_records(bootstrap: str, cuts: list[TopicPartition], timeout_s: float = 30.0) -> dict[int, int]:
    """Delete every record below each ``TopicPartition``'s offset (the Admin API's DeleteRecords, KIP-107);
    returns ``{partition: the new log start offset}``.

    Raises: ``confluent_kafka.KafkaException`` when the request fails (no leader, not authorised)."""
    a = admin(bootstrap)
    futs = a.delete_records(cuts, request_timeout=timeout_s, operation_timeout=timeout_s)
    return {tp.partition: fut.result(timeout=timeout_s + 5).low_watermark for tp, fut in futs.items()}


@dataclass
class TopicRead:
    """A topic read to its end. ``frame`` columns: partition, offset, timestamp (the record's Kafka
    timestamp, epoch ms), key (str), value (bytes) and one column per header name (str), or what the
    read's ``decode`` / ``keep`` made of them (:class:`Records`); ``ends`` is the offset each partition
    was read to."""

    frame: pd.DataFrame
    ends: dict[int, int]
    complete: bool


READ_CHUNK = 100_000
"""Messages :class:`Records` holds as Python objects before it turns them into columns. At 100,000 a
chunk's objects (``Message``, key str, value bytes, header lists: ~0.5 KiB a record) take ~50 MiB,
whatever the topic's size; the per-chunk pandas/pyarrow overhead is ~1% of the read."""

class Records:
    """The columns :func:`read_topic` builds from the messages librdkafka hands over, up to each
    partition's end offset. Its own class so that the tests and the checker benchmark
    (``bench/checker_bench.py``) feed this very loop with synthetic messages.

    Memory is bounded by ``chunk``, not by the topic: every ``chunk`` messages (:data:`READ_CHUNK`)
    the Python objects held so far become one columnar chunk and are dropped. A chunk is the raw frame
    (:meth:`raw_frame`'s columns), then ``decode(frame)`` when given (e.g. ``decode_values``: the
    ``value`` bytes → ``key``/``seq``/...), then ``keep(frame)`` when given (to cut columns early:
    the read_uncommitted output needs only partition and offset), then compact columns
    (``onceproof.store.columns.Chunks``: ``category`` for string columns with few distinct values,
    ``string[pyarrow]`` for the others). :meth:`frame` joins the chunks one column at a time.
    ``capacity`` (an upper bound on the records, e.g. the sum of the end offsets) lets the columns be
    written into arrays allocated once (``onceproof.store.columns.Chunks``), so they are not copied to be joined.
    Per-record semantics do not change with ``chunk``: a frame read in chunks equals the one built from
    all messages at once, up to those dtypes (``tests/test_chunked_read.py``)."""

    def __init__(self, topic: str, with_headers: bool, decode=None, keep=None, chunk: int = READ_CHUNK,
                 capacity: int | None = None, places_only: bool = False):
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1 message, got {chunk}")
        if places_only and (with_headers or decode is not None):
            raise ValueError("places_only takes neither headers nor a decoder: it keeps partition and offset")
        self.topic, self.with_headers, self.places_only = topic, with_headers, places_only
        self.decode, self.keep, self.chunk = decode, keep, chunk
        # the value's int fields (in_partition, ...) as int32 when they fit; Kafka's own columns as they are
        self.chunks = Chunks(capacity=capacity, narrow_ints=True, keep_wide=("partition", "offset", "timestamp"))
        self.count = 0  # records taken so far
        self._clear()

    def _clear(self) -> None:
        self.parts: list[int] = []
        self.offs: list[int] = []
        self.tss: list[int] = []
        self.keys: list[str | None] = []
        self.vals: list[bytes | None] = []
        self.hdrs: list = []

    def add(self, msgs, ends: dict[int, int], todo: set[int]) -> None:
        """Append ``msgs`` (``confluent_kafka.Message``) below ``ends[partition]``; a partition whose end is
        reached leaves ``todo``. Turns what it holds into a chunk once that reaches ``chunk`` messages.
        Raises ``TopicError`` for a message carrying an error other than EOF."""
        parts, offs, tss, keys, vals, hdrs = self.parts, self.offs, self.tss, self.keys, self.vals, self.hdrs
        with_headers, places_only = self.with_headers, self.places_only
        for m in msgs:
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    continue
                raise TopicError(f"reading {self.topic}: {m.error()}")
            p, o = m.partition(), m.offset()
            if o >= ends[p]:
                todo.discard(p)
                continue
            parts.append(p)
            offs.append(o)
            if o + 1 >= ends[p]:
                todo.discard(p)
            if places_only:
                continue
            tss.append(m.timestamp()[1])
            k = m.key()
            keys.append(k.decode() if k is not None else None)
            vals.append(m.value())
            if with_headers:
                hdrs.append(m.headers())
        if len(parts) >= self.chunk:
            self._flush()

    def raw_frame(self) -> pd.DataFrame:
        """The messages held now: ``partition`` int32, ``offset`` int64, ``timestamp`` int64 (ms), ``key``
        str, ``value`` bytes, and the provenance header columns when reading with headers; only the first
        two with ``places_only``."""
        cols = {"partition": pd.array(self.parts, dtype="int32"), "offset": pd.array(self.offs, dtype="int64")}
        if self.places_only:
            return pd.DataFrame(cols)
        frame = pd.DataFrame({**cols, "timestamp": pd.array(self.tss, dtype="int64"),
                              "key": self.keys, "value": self.vals})
        if self.with_headers:
            frame = frame.join(_headers_frame(self.hdrs))
        return frame

    def _flush(self, force: bool = False) -> None:
        if not self.parts and not force:
            return
        frame = self.raw_frame()
        self.count += len(frame)
        self._clear()  # the Message-derived objects go now, before decoding makes columns
        if self.decode is not None:
            frame = self.decode(frame)
        if self.keep is not None:
            frame = self.keep(frame)
        self.chunks.add(frame)
        del frame
        release_freed_memory()  # the chunk's objects and decoding temporaries, before the next chunk

    def frame(self) -> pd.DataFrame:
        """Every record taken, as one frame (the chunks concatenated; an empty topic gives the columns
        ``decode``/``keep`` make of no rows). The chunks are released as their columns are copied."""
        if self.parts or not len(self.chunks):
            self._flush(force=True)
        out = self.chunks.frame()
        release_freed_memory()
        return out


CONSUME_WAIT_S = 0.2
"""The longest ``Consumer.consume`` call of :func:`read_topic` waits for a batch to fill, s."""


def read_topic(bootstrap: str, topic: str, committed: bool = True, timeout_s: float = 120.0,
               with_headers: bool = True, decode=None, keep=None, chunk: int = READ_CHUNK,
               places_only: bool = False) -> TopicRead:
    """Read ``topic`` from the beginning up to the end offsets taken at the start of the read
    (LSO at read_committed, HW otherwise), ``chunk`` messages at a time: each chunk goes through
    ``decode`` and ``keep`` (frame → frame, e.g. :func:`decode_values`, a column cut) into compact
    columns before the next is read (:class:`Records`), so memory follows the columns kept, not the
    messages. ``places_only``: keep ``partition`` and ``offset`` only, taking nothing else from the
    messages (the read_uncommitted output, which only tells which records read_committed hid).

    ``complete`` is false when the deadline passed before every partition reached its end offset.
    Raises ``TopicError`` for a message carrying an error (other than end of partition).
    """
    ends = end_offsets(bootstrap, topic, committed)
    c = Consumer(client_config(bootstrap, {"group.id": f"onceproof-reader-{time.time_ns()}",
                                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                           "isolation.level": "read_committed" if committed else "read_uncommitted",
                                           "fetch.max.bytes": 64 * 1024 * 1024},
                                logger=logging.getLogger("onceproof.librdkafka.reader")))
    todo = {p for p, e in ends.items() if e > 0}
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    # a partition holds at most its end offset's worth of records: room for them all, untouched until read
    records = Records(topic, with_headers, decode=decode, keep=keep, chunk=chunk,
                      capacity=sum(max(e, 0) for e in ends.values()), places_only=places_only)
    deadline = time.monotonic() + timeout_s
    try:
        while todo and time.monotonic() < deadline:
            # consume() waits its whole timeout unless 10,000 messages are there: a short one keeps the
            # last, partial batch of every read from costing a fixed second
            records.add(c.consume(num_messages=10000, timeout=CONSUME_WAIT_S), ends, todo)
            # read_committed skips aborted records and control markers: the position tells us
            # we are past the end even when the last records were not delivered to us.
            for tp in c.position([TopicPartition(topic, p) for p in list(todo)]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
    finally:
        c.close()
    return TopicRead(records.frame(), ends, complete=not todo)


def _headers_frame(hdrs: list) -> pd.DataFrame:
    """Headers of each record → one column per header name (order of first appearance; NaN where a
    record lacks it; the last value of a repeated header). Built a column at a time, decoding each
    distinct value once: the provenance values repeat a lot (1.8× faster than a dict per record in
    ``bench/``)."""
    n = len(hdrs)
    cols: dict[str, list] = {}
    dec: dict = {}
    for i, h in enumerate(hdrs):
        if not h:
            continue
        for k, v in h:
            col = cols.get(k)
            if col is None:
                col = cols[k] = [np.nan] * n
            if isinstance(v, bytes):
                s = dec.get(v)
                if s is None:
                    s = dec[v] = v.decode()
                v = s
            col[i] = v
    if not n:
        return pd.DataFrame()
    return pd.DataFrame({k: np.array(v, dtype=object) for k, v in cols.items()}, index=range(n),
                        columns=pd.Index(list(cols), dtype=object))


_ARROW_CHUNK = 1 << 20


def decode_values(frame: pd.DataFrame) -> pd.DataFrame:
    """Parse each JSON ``value`` into columns (``key``/``seq`` at least) and drop the raw bytes.

    Records whose value is not a JSON object with ``key`` and ``seq`` are kept with ``seq`` = NA (the
    checker counts them as ``unexpected``). Per chunk of 1M records the values are joined into one
    newline-separated buffer and parsed by
    pyarrow's C++ JSON reader. Values that cannot be one JSON object on one line (None, empty, not
    ``{...}``) are found with numpy on the buffer and decoded by the exact per-record ``json.loads``
    path; a chunk pyarrow still rejects (a field whose type changes, a duplicate field, bad JSON
    inside braces) is bisected down to 1024 records, which then go the per-record path. So garbage
    values end up with ``seq`` = NA exactly as the per-record path gives (about 4× faster than
    ``json.loads`` per record; numbers in ``bench/README.md``).
    """
    import pyarrow as pa
    import pyarrow.json as pj

    vals = frame["value"].to_numpy(dtype=object)
    n = len(vals)
    opts = pj.ParseOptions(explicit_schema=pa.schema([("key", pa.string()), ("seq", pa.int64())]),
                           unexpected_field_behavior="infer")
    ropts = pj.ReadOptions(block_size=16 << 20)

    def arrow(chunk) -> pd.DataFrame | None:
        try:
            t = pj.read_json(pa.py_buffer(b"\n".join(chunk)), read_options=ropts, parse_options=opts)
        except (TypeError, pa.ArrowInvalid):
            return None
        if t.num_rows != len(chunk):
            return None
        seq = pd.Series(pd.arrays.ArrowExtensionArray(t.column("seq"))).astype("Int64")
        df = t.drop_columns(["seq"]).to_pandas()
        df["seq"] = seq.to_numpy()  # after the others, as from_records puts it when the value has it
        return df

    def parse(lo: int, hi: int) -> list[tuple[np.ndarray, pd.DataFrame]]:
        chunk = vals[lo:hi]
        rows = np.arange(lo, hi)
        try:
            buf = b"\n".join(chunk)
        except TypeError:  # None (a tombstone) among them
            buf = None
        if buf is not None:
            a = np.frombuffer(buf, np.uint8)
            nl = np.flatnonzero(a == 10)
            if len(nl) == len(chunk) - 1:  # no value has a newline: line i is value i
                starts, ends = np.r_[0, nl + 1], np.r_[nl, len(a)]
                good = ends > starts
                good[good] &= (a[starts[good]] == ord("{")) & (a[ends[good] - 1] == ord("}"))
                if good.all():
                    df = arrow(chunk)
                    if df is not None:
                        return [(rows, df)]
                else:
                    df = arrow(chunk[good]) if good.any() else None
                    if df is not None or not good.any():
                        out = [(rows[~good], _parse_slow(chunk[~good]))]
                        return out + ([(rows[good], df)] if df is not None else [])
        if hi - lo <= 1024:
            return [(rows, _parse_slow(chunk))]
        mid = (lo + hi) // 2
        return parse(lo, mid) + parse(mid, hi)

    pieces = [pc for lo in range(0, n, _ARROW_CHUNK) for pc in parse(lo, min(n, lo + _ARROW_CHUNK))]
    if len(pieces) == 1:
        parsed = pieces[0][1]
    elif pieces:
        where = np.concatenate([r for r, _ in pieces])
        parsed = pd.concat([df for _, df in pieces], ignore_index=True)
        if (np.diff(where) != 1).any():
            parsed = parsed.iloc[np.argsort(where, kind="stable")]
    else:
        parsed = pd.DataFrame()
    parsed.index = frame.index
    out = frame.drop(columns=["value"])
    if "key" in parsed:
        key = parsed["key"].astype("string")
        na = key.isna().to_numpy()
        if na.any():  # = .fillna(out["key"].astype("string")), converting only what is needed
            key[na] = out["key"][na].astype("string")
        out["key"] = key
    out["seq"] = pd.to_numeric(parsed["seq"], errors="coerce").astype("Int64") if "seq" in parsed \
        else pd.array([pd.NA] * len(out), dtype="Int64")
    for col in parsed.columns:
        if col not in ("key", "seq"):
            out[col] = parsed[col]
    return out


def _parse_slow(chunk) -> pd.DataFrame:
    def parse(v):
        try:
            d = json.loads(v)
            return d if isinstance(d, dict) else {}
        except (TypeError, ValueError):
            return {}
    return pd.DataFrame.from_records([parse(v) for v in chunk], index=pd.RangeIndex(len(chunk)))
