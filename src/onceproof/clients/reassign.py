"""Partition reassignment with Kafka's own tool, as an operator does it: ``kafka-reassign-partitions.sh``,
i.e. ``org.apache.kafka.tools.reassign.ReassignPartitionsCommand`` (KIP-455's
``AlterPartitionReassignments`` underneath), run from the tools classpath
(:func:`onceproof.backends.common.jars.kafka_tools_classpath`).

Why the tool and not a Python client: confluent-kafka 2.16 has no ``alter_partition_reassignments``
(librdkafka does not implement KIP-455's Admin call), and the tool is what operators run.

A *plan* is ``{(topic, partition): [replica broker ids, preferred leader first]}``.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from onceproof.clients import kafka_tools, topics

TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
Plan = dict[tuple[str, int], list[int]]


class ReassignError(RuntimeError):
    """The tool refused the plan or did not finish (its exit code and output in the message)."""


def plan_json(plan: Plan) -> dict:
    """The tool's ``--reassignment-json-file`` document for ``plan``: ``{"version": 1, "partitions":
    [{"topic", "partition", "replicas"}]}`` (Kafka docs, "Reassigning partitions"), sorted."""
    return {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                         for (t, p), r in sorted(plan.items())]}


def execute(bootstrap: str, plan: Plan, json_path: Path, *, additional: bool = False,
            timeout_s: float = 90.0) -> str:
    """Write ``plan`` to ``json_path`` and run the tool's ``--execute`` against ``bootstrap``; with
    ``additional`` (``--additional``), on top of a reassignment still in progress. Returns the tool's
    last output lines (≤ 1,000 characters). The reassignment then runs in the cluster: see
    :func:`wait_done`.

    Raises: :class:`ReassignError` (non-zero exit or timeout, with its output);
    ``onceproof.backends.common.jars.ResolveError`` when the tools cannot be resolved or there is no java.
    """
    json_path.write_text(json.dumps(plan_json(plan)))
    try:
        code, out = kafka_tools.run(TOOL, bootstrap, ["--reassignment-json-file", str(json_path), "--execute",
                                                      *(["--additional"] if additional else [])], timeout_s)
    except subprocess.TimeoutExpired as e:
        raise ReassignError(f"the reassignment tool did not answer within {timeout_s:.0f} s") from e
    if code != 0:
        raise ReassignError(f"the reassignment tool exited {code}: {out[-1000:]}")
    return out[-1000:]


def pending(view: dict[str, dict[int, dict]], plan: Plan) -> list[str]:
    """The ``topic:partition`` of ``plan`` whose replicas (in ``view``, :func:`topics.replica_view`'s shape)
    are not yet exactly the planned set, or whose ISR is not all of it: a reassignment is complete when the
    adding replicas have caught up and the removing ones are gone."""
    out = []
    for (t, p), want in sorted(plan.items()):
        m = view.get(t, {}).get(p)
        if m is None or sorted(m["replicas"]) != sorted(want) or sorted(m["isr"]) != sorted(want):
            out.append(f"{t}:{p}")
    return out


def wait_view(bootstrap: str, plan: Plan, left_of: Callable[[dict[str, dict[int, dict]], Plan], list[str]],
              timeout_s: float, stop: threading.Event | None = None, before_poll: Callable[[], None] | None = None
              ) -> tuple[float | None, list[str]]:
    """Poll the metadata (:func:`topics.replica_view`) every 0.5 s until ``left_of(view, plan)`` (the
    ``topic:partition`` of ``plan`` not yet as wanted) is empty, calling ``before_poll`` first each time.
    Returns ``(seconds it took, [])``, or ``(None, what was still left)`` after ``timeout_s`` s or once
    ``stop`` is set."""
    t0 = time.monotonic()
    left: list[str] = [f"{t}:{p}" for t, p in sorted(plan)]
    while time.monotonic() - t0 < timeout_s and not (stop is not None and stop.is_set()):
        if before_poll is not None:
            before_poll()
        try:
            left = left_of(topics.replica_view(bootstrap), plan)
        except Exception:  # noqa: BLE001 - a broker busy with the move: ask again
            pass
        if not left:
            return round(time.monotonic() - t0, 2), []
        time.sleep(0.5)
    return None, left


def wait_done(bootstrap: str, plan: Plan, timeout_s: float, stop: threading.Event | None = None
              ) -> tuple[float | None, list[str]]:
    """Poll the metadata every 0.5 s until every partition of ``plan`` is assigned as planned
    (:func:`pending`, through :func:`wait_view`). Returns ``(seconds it took, [])``, or ``(None, the
    partitions still pending)`` after ``timeout_s`` s or once ``stop`` is set."""
    return wait_view(bootstrap, plan, pending, timeout_s, stop)
