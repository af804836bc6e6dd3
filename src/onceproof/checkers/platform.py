"""Platform findings: anomalies of the input log, which the workload's Kafka client and the brokers wrote
before the pipeline under test read anything — kept apart from the pipeline's verdict.

A user certifying a *pipeline* must not get a red certificate for a resend of our own workload's client;
yet a lost acknowledged write or a resent record is a real finding about Kafka and its client, so it is
named, with the versions that ran and the known issue it looks like, and never hidden.

* ``input-duplicate`` – one (key, seq) at two input offsets though it was sent once;
* ``lost-write`` – a send acknowledged ``ok`` missing from the input log;
* ``failed-write-visible`` – a send reported definitely failed whose record is in the input log.

The pipeline is judged per input record either way (it owes each record of the input log once). The
pipeline's verdict leaves these out unless ``strict`` (``--strict``): then they count, as before.
"""

from __future__ import annotations

PLATFORM = ("input-duplicate", "lost-write", "failed-write-visible")
SUSPECTS = {
    "input-duplicate": "an idempotent producer's resend of a possibly-persisted batch under a bumped epoch "
                       "after a timed-out request during a leader change (confluentinc/librdkafka#4953); the "
                       "transactional workload producer (--producer transactional, the default) hides such "
                       "resends in an aborted transaction",
    "lost-write": "an acknowledged write lost by the brokers (acks=all with too few in-sync replicas, an "
                  "unclean leader election, or a data-directory loss)",
    "failed-write-visible": "a client that reported a definite failure for a record the broker had appended",
}


def split(counts: dict, strict: bool) -> tuple[dict, tuple[str, ...]]:
    """The platform findings in ``counts`` (``{name: count, "suspected": {name: text}}``, empty when none)
    and the anomaly names that therefore do not make the pipeline's verdict (``()`` when ``strict``)."""
    found = {a: int(counts[a]) for a in PLATFORM if counts.get(a)}
    if not found:
        return {}, () if strict else PLATFORM
    return ({"counts": found, "suspected": {a: SUSPECTS[a] for a in found}, "strict": strict},
            () if strict else PLATFORM)


def duplicate_origin(examples: list[dict], times: dict[tuple[int, int], int], producer: str) -> str | None:
    """Where the input's duplicated records came from, as far as the run shows it: ``examples`` are the
    ``input-duplicate`` examples (each with its ``inputs`` places and ``nemesis_nearby``), ``times`` the
    Kafka timestamps (CreateTime, epoch ms) at those places. When every example's copies carry one
    timestamp, each pair's copies are one ``produce()`` call appended twice (the workload sends each
    (key, seq) once): the client resent its request; the sentence names the producer and the nearest
    fault. ``None`` when the timestamps differ or are unknown (nothing shown)."""
    same = []
    for ex in examples:
        ts = {times.get((int(i["partition"]), int(i["offset"]))) for i in ex.get("inputs") or []}
        if not ts or None in ts:
            return None
        same.append(len(ts) == 1)
    if not same or not all(same):
        return None
    near = [op.get("f") for ex in examples for op in (ex.get("nemesis_nearby") or [])[:1]]
    at = f", each at a {max(set(near), key=near.count)} turn" if near else ""
    setting = " despite message.send.max.retries=0" if producer == "at-most-once" else ""
    return (f"the client resent a produce request{setting}: the two copies of each of the {len(examples)} pairs "
            f"shown carry the CreateTime of one produce() call, and the workload sends each (key, seq) once{at}")


def only_platform(counts: dict, platform: tuple[str, ...]) -> bool:
    """Every non-zero anomaly count in ``counts`` is one of ``platform`` (or its ``-records`` detail)."""
    return not any(n for a, n in counts.items()
                   if a not in platform and a.removesuffix("-records") not in platform and a != "stuck")


def platform_lines(result: dict) -> list[str]:
    """The platform findings (``checkers/platform.py``) as console lines: counts, whether they count in the
    verdict, the versions that ran and the suspected known issue; ``[]`` when there are none."""
    pf = result.get("platform_findings") or {}
    if not pf.get("counts"):
        return []
    counted = "counted in the verdict (--strict)" if pf.get("strict") else \
        "not the pipeline's verdict; --strict counts them"
    vs = ", ".join(f"{k} {v}" for k, v in (pf.get("versions") or {}).items())
    lines = [f"platform findings ({counted}): " + ", ".join(f"{a} {n}" for a, n in pf["counts"].items())
             + (f" — {vs}, {pf['producer']} producer" if vs and pf.get("producer") else "")]
    lines += [f"  suspected, {a}: {why}" for a, why in (pf.get("suspected") or {}).items()]
    lines += [f"  seen, {a}: {what}" for a, what in (pf.get("origin") or {}).items()]
    return lines
