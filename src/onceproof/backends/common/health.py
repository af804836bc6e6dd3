"""The start-up check every backend's :meth:`onceproof.backends.base.Cluster.healthy` shares: Kafka's
own metadata says every broker registered and a controller was elected."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka.admin import AdminClient

from onceproof.backends.base import ClusterError
from onceproof.kafka_config import client_config


def wait_healthy(bootstrap: str, nodes: int, *, exited: Callable[[], str | None],
                 not_listening: Callable[[], list[int]], timeout_s: float, where: str) -> None:
    """Block until Kafka's metadata at ``bootstrap`` lists ``nodes`` brokers and a controller, and
    ``not_listening()`` (broker ids whose process does not yet listen on all its ports) is empty: Kafka 4
    binds its data-plane listeners only *after* the broker registers with the controller, so a broker
    whose client port was taken dies just after looking registered. Polls every 0.5 s; the shared
    start-up check of every backend's :meth:`Cluster.healthy`.

    Args:
        exited: what went wrong when a broker is already gone (e.g. ``"broker(s) [2] exited"``), else None.
        where: appended to the error, e.g. ``"see <log dir>/"``.

    Raises: ``ClusterError`` when ``exited()`` says so, or after ``timeout_s`` seconds with the last state.
    """
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(client_config(bootstrap, {"socket.timeout.ms": 5000},
                                      logger=logging.getLogger("onceproof.librdkafka.admin")))
    last = "no answer"
    while time.monotonic() < deadline:
        why = exited()
        if why:
            raise ClusterError(f"{why} during start; {where}")
        try:
            md = admin.list_topics(timeout=5)
            if len(md.brokers) == nodes and md.controller_id >= 0:
                deaf = not_listening()
                if not deaf:
                    return
                last = f"broker(s) {deaf} registered but not yet listening on their ports"
            else:
                last = f"{len(md.brokers)} broker(s) registered"
        except Exception as e:  # noqa: BLE001 - librdkafka raises KafkaException while nodes start
            last = str(e)
        time.sleep(0.5)
    raise ClusterError(f"cluster not healthy after {timeout_s:.0f}s ({last}); {where}")
