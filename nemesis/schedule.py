"""Seeded fault schedules: a plan is a plain list you can print, compare and replay.

``plan(faults, interval_s, time_limit_s, seed)`` → ``[(at_s, fault_name), ...]``: faults come in rounds;
each round holds every requested fault once, in a seeded shuffled order, so every fault type is
exercised as soon as the run is long enough for one round (Jepsen's random mix can starve a fault in
a short run). Gaps are ``interval_s`` × a seeded factor in [0.75, 1.25]. Same arguments → same plan.
"""

from __future__ import annotations

import random


def plan(faults: list[str], interval_s: float, time_limit_s: float, seed: int,
         targets: dict[str, tuple[str, ...]] | None = None) -> list[tuple[float, str]]:
    """The fault schedule, times in seconds from the moment the pipeline is up.

    ``targets`` maps a fault name to its target choices: a fault given without ``:target`` gets one
    drawn from the seeded RNG at every turn, so the plan names fault *and* target
    (``kill-broker:leader``) and a seed replays both.

    Raises: ``ValueError`` for a non-positive interval.
    """
    targets = targets or {}
    if not faults:
        return []
    if interval_s <= 0:
        raise ValueError(f"--nemesis-interval must be > 0 s, got {interval_s}")
    rng = random.Random(f"schedule-{seed}")
    out: list[tuple[float, str]] = []
    t = interval_s * rng.uniform(0.5, 1.0)
    while t < time_limit_s:
        order = list(faults)
        rng.shuffle(order)
        for f in order:
            if t >= time_limit_s:
                break
            name, _, target = f.partition(":")
            if not target and targets.get(name):
                f = f"{name}:{rng.choice(list(targets[name]))}"
            out.append((round(t, 3), f))
            t += interval_s * rng.uniform(0.75, 1.25)
    return out
