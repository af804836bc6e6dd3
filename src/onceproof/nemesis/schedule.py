"""Seeded fault schedules: a plan is a plain list you can print, compare and replay.

``plan(faults, interval_s, time_limit_s, seed, targets, durations)`` → ``[(at_s, spec), ...]``. Faults
come in rounds; each round holds every requested spec once, in a seeded shuffled order, so every fault
*and target* is exercised as soon as the run is long enough for one round (Jepsen's random mix can
starve a fault in a short run). A fault's next neighbour starts ``max(gap, expected duration)`` later,
where ``gap`` is ``interval_s`` × a seeded factor in [0.75, 1.25] and the expected duration comes from
``durations`` (``onceproof.nemesis.catalog.expected_s``): faults run one at a time, so a plan that ignored their
length would drift past the time limit. Same arguments → same plan.

Sizing: rounds repeat while they start before ``time_limit_s``; the first round always completes. A
plan whose first round cannot end by ``time_limit_s × max_run_factor`` (the most a run may go on past
its time limit to give every fault its turn) is refused with :class:`PlanDoesNotFit`, which names the
minimum ``--time-limit``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable


class PlanDoesNotFit(ValueError):
    """The faults' first round cannot finish in the time the run may last. ``min_time_limit_s`` is the
    smallest ``--time-limit`` (s) that fits."""

    def __init__(self, need_s: float, time_limit_s: float, max_run_factor: float, n: int):
        self.min_time_limit_s = math.ceil(need_s / max_run_factor)
        super().__init__(
            f"the {n} faults need about {need_s:.0f}s for one turn each, more than --time-limit "
            f"{time_limit_s:g} × {max_run_factor:g} allows: use --time-limit {self.min_time_limit_s} or more "
            f"(or fewer faults, a shorter --fault-hold or --txn-timeout-ms)")


def plan(faults: list[str], interval_s: float, time_limit_s: float, seed: int,
         targets: dict[str, tuple[str, ...]] | None = None,
         durations: Callable[[str], float] | None = None,
         max_run_factor: float = 3.0) -> list[tuple[float, str]]:
    """The fault schedule, times in seconds from the moment the pipeline is up.

    ``targets`` maps a fault name to its target choices: a fault given without ``:target`` gets one
    drawn from the seeded RNG at every turn, so the plan names fault *and* target
    (``kill-broker:leader``) and a seed replays both. ``durations(spec)`` is a fault's expected length
    in seconds (default 0: only the interval spaces faults).

    Raises: ``ValueError`` for a non-positive or non-finite interval; :class:`PlanDoesNotFit` when one
    round cannot fit in ``time_limit_s × max_run_factor``.
    """
    targets = targets or {}
    durations = durations or (lambda _spec: 0.0)
    if not faults:
        return []
    if not (interval_s > 0 and math.isfinite(interval_s)):
        raise ValueError(f"--nemesis-interval must be a finite number > 0 s, got {interval_s}")
    rng = random.Random(f"schedule-{seed}")
    out: list[tuple[float, str]] = []
    t = interval_s * rng.uniform(0.5, 1.0)
    first_round = True
    while first_round or t < time_limit_s:
        order = list(faults)
        rng.shuffle(order)
        for f in order:
            if not first_round and t >= time_limit_s:
                break
            name, _, target = f.partition(":")
            if not target and targets.get(name):
                f = f"{name}:{rng.choice(list(targets[name]))}"
            out.append((round(t, 3), f))
            t += max(interval_s * rng.uniform(0.75, 1.25), durations(f))
        if first_round and t > time_limit_s * max_run_factor:
            raise PlanDoesNotFit(t, time_limit_s, max_run_factor, len(faults))
        first_round = False
    return out


def keep_running(elapsed_s: float, nemesis_elapsed_s: float | None, time_limit_s: float,
                 max_run_factor: float, all_invoked: bool) -> bool:
    """Whether the run phase goes on: always within ``time_limit_s``; past it, until every planned
    fault has been invoked, but at most ``time_limit_s × max_run_factor`` of fault time
    (``nemesis_elapsed_s``, s: ``NemesisRunner.fault_time_s``, counted from the moment the nemesis
    started, less its waits for the pipeline to recover between faults), because the plan's clock
    starts there, not when the workload did. A pipeline slow to commit its first batch (a loaded CI
    machine: 75 s seen), or slow to commit again after a driver kill (77 s seen), must not eat the
    faults' budget. ``nemesis_elapsed_s`` is ``None`` while the nemesis waits for the pipeline; then
    the budget counts from the workload's start (``elapsed_s``), so a pipeline that never commits still
    ends the run. Longest run phase: start-up wait + ``time_limit_s × max_run_factor`` + one
    ``recover_max_s`` (90 s) per planned fault.
    """
    if elapsed_s < time_limit_s:
        return True
    if all_invoked:
        return False
    budget_el = elapsed_s if nemesis_elapsed_s is None else nemesis_elapsed_s
    return budget_el < time_limit_s * max_run_factor
