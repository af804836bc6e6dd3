"""Samples the output topic's last stable offset (LSO) and high watermark (HW) per partition through the
whole test, faults included, so the liveness checker (``checkers/liveness.py``) can tell how long an
open transaction held a partition's LSO in place.

One ListOffsets request per isolation level per sample (KIP-98: ``ListOffsets`` at ``read_committed``
answers the LSO, at ``read_uncommitted`` the HW), on one AdminClient kept for the run: a new client per
sample would cost a connection and a metadata round trip to every broker each second.

Output: a frame with columns ``t_ms`` (epoch ms, when the LSO request was sent), ``partition``,
``lso``, ``hw`` (offsets); a sample that failed (a broker down, the client cut off by a fault) is left
out, so a gap in ``t_ms`` is a time nothing was known, never a time the LSO moved.
"""

from __future__ import annotations

import logging
import threading
import time

import pandas as pd
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from onceproof.kafka_config import client_config

COLUMNS = ["t_ms", "partition", "lso", "hw"]
INTERVAL_S = 1.0
"""Seconds between samples: a pin shorter than this may be missed, one longer is measured ±1 s."""


class LsoSampler:
    """Samples ``topic``'s LSO and HW every ``interval_s`` seconds in a thread until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = INTERVAL_S):
        self.bootstrap, self.topic, self.interval_s = bootstrap, topic, interval_s
        self._rows: list[tuple[int, int, int, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lso-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        a = AdminClient(client_config(self.bootstrap, {"socket.timeout.ms": 5000},
                                      logger=logging.getLogger("onceproof.librdkafka.lso")))
        parts: list[int] = []
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                if not parts:
                    md = a.list_topics(self.topic, timeout=5).topics.get(self.topic)
                    parts = sorted(md.partitions) if md is not None and md.error is None else []
                if parts:
                    self._rows.extend(self._sample(a, parts))
            except (KafkaException, TimeoutError, ValueError, RuntimeError):
                self.errors += 1  # a fault between us and the brokers: no sample this time
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def _sample(self, a: AdminClient, parts: list[int]) -> list[tuple[int, int, int, int]]:
        t_ms = int(time.time() * 1000)
        ends = {}
        for iso in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            req = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in parts}
            futs = a.list_offsets(req, isolation_level=iso, request_timeout=5)
            ends[iso] = {tp.partition: f.result(timeout=10).offset for tp, f in futs.items()}
        lso, hw = ends[IsolationLevel.READ_COMMITTED], ends[IsolationLevel.READ_UNCOMMITTED]
        return [(t_ms, p, lso[p], hw[p]) for p in parts if p in lso and p in hw]

    def latest(self) -> dict[int, tuple[int, int, int]]:
        """The newest sample per partition: ``{partition: (t_ms, lso, hw)}`` (``{}`` before the first)."""
        out: dict[int, tuple[int, int, int]] = {}
        for t_ms, p, lso, hw in reversed(self._rows[-256:]):
            out.setdefault(p, (t_ms, lso, hw))
        return out

    def stop(self) -> pd.DataFrame:
        """Stop (≤ 15 s) and return the samples (see the module docstring for the columns)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return pd.DataFrame(list(self._rows), columns=COLUMNS).astype("int64")
