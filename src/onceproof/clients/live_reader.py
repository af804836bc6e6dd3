"""A read_committed consumer of the output topic that runs through the whole test, faults included —
the first of Kafka's transactions system test's two readers (the second is the final read after
recovery, ``checking/checks.py``).

Its view must never show a duplicate or an aborted record either, and it measures end-to-end
*visibility* latency: the wall time this consumer received a record minus the input record's append
time (``in_ts`` in the output value), in ms.

Output: ``live.parquet`` with columns partition, offset, key, seq, in_ts (epoch ms), seen_ms (epoch ms,
when this consumer got the record), and the provenance headers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pandas as pd
from confluent_kafka import Consumer, KafkaError

from onceproof.kafka_config import client_config


class LiveReader:
    """Consumes ``topic`` at read_committed from the beginning in a thread until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self._rows: list[tuple] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self._reported = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="live-reader", daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        """Records received so far."""
        return len(self._rows)

    def rows_since(self, start: int) -> list[tuple]:
        """Rows received after the first ``start`` ones, as ``(partition, offset, key, value bytes,
        seen_ms, headers)`` (a session's running anomaly counts read them as they come)."""
        return self._rows[start:]

    def _run(self) -> None:
        c = Consumer(client_config(self.bootstrap, {"group.id": f"onceproof-live-{time.time_ns()}",
                                                    "isolation.level": "read_committed",
                                                    "auto.offset.reset": "earliest", "enable.auto.commit": False},
                                    logger=logging.getLogger("onceproof.librdkafka.live")))
        c.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                for m in c.consume(num_messages=5000, timeout=0.5):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self.errors.append(str(m.error()))
                        continue
                    now = int(time.time() * 1000)
                    k = m.key()
                    self._rows.append((m.partition(), m.offset(), k.decode() if k else None, m.value(),
                                       now, m.headers()))
        finally:
            c.close()

    def new_errors(self) -> list[str]:
        """Errors since the last call, prefixed for the console (the full list stays in ``errors``)."""
        new, self._reported = self.errors[self._reported:], len(self.errors)
        return [f"live reader: {e}" for e in new]

    def stop(self) -> pd.DataFrame:
        """Stop and return what was seen (see module docstring for columns)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return frame(list(self._rows))

    def save(self, df: pd.DataFrame, path: Path) -> None:
        df.to_parquet(path, index=False)


def frame(rows: list[tuple]) -> pd.DataFrame:
    """``[(partition, offset, key, value bytes, seen_ms, headers)]`` → the live.parquet frame."""
    recs = []
    for p, o, k, v, seen, hdrs in rows:
        try:
            d = json.loads(v)
        except (TypeError, ValueError):
            d = {}
        rec = {"partition": p, "offset": o, "key": d.get("key", k), "seq": d.get("seq"),
               "in_ts": d.get("in_ts"), "seen_ms": seen}
        for hk, hv in hdrs or []:
            rec[hk] = hv.decode() if isinstance(hv, bytes) else hv
        recs.append(rec)
    df = pd.DataFrame.from_records(recs) if recs else pd.DataFrame(
        columns=["partition", "offset", "key", "seq", "in_ts", "seen_ms"])
    df["seq"] = pd.to_numeric(df["seq"], errors="coerce").astype("Int64")
    return df
