"""Shrink a failing run's fault schedule to a 1-minimal one that still fails the same way.

A run (``onceproof run``) injects a seeded schedule of faults; its ``nemesis.jsonl`` records each
fault's invoke op with the planned time (``planned_s``, seconds from the pipeline's first committed
batch) and the RNG key that picked its concrete targets (``rng``). :func:`schedule_of` reads that
schedule back; :func:`shrink` replays subsets of it (``onceproof run --schedule FILE``) and, with
:func:`ddmin`, finds a subset where removing any single fault no longer reproduces the failure.

"The same failure" (:func:`same_failure`): the replay's verdict is ``invalid`` and it shows at least
one of the original run's definite anomaly classes (:func:`failure_class`).

Schedule file (:func:`write_schedule`): ``{"faults": [{"at_s": float, "f": str, "rng": str}, ...]}``.
Times in seconds.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from onceproof.store.runfiles import NEMESIS, RESULTS, TEST

T = TypeVar("T")

SHRINK_JSON = "shrink.json"
MINIMAL_SCHEDULE = "minimal-schedule.json"


# --- delta debugging -------------------------------------------------------------------------------

@dataclass
class DdminResult(Generic[T]):
    """What :func:`ddmin` found.

    ``minimal``: the smallest failing subset found (order of the input kept). ``tests``: every
    candidate actually tested, in order, with its outcome (``True`` = fails); memoised look-ups are not
    repeated here. ``exhausted``: the ``max_tests`` budget stopped the search before it ended.
    ``one_minimal``: the search ended, so removing any single element of ``minimal`` makes it pass
    (never tested for the empty list, which is assumed to pass).
    """

    minimal: list[T]
    tests: list[tuple[list[T], bool]] = field(default_factory=list)
    exhausted: bool = False
    one_minimal: bool = True


class _Budget(Exception):
    """Raised inside :func:`ddmin` when one more test would exceed ``max_tests``."""


def _split(c: Sequence[int], n: int) -> list[list[int]]:
    """``c`` cut into ``n`` contiguous, non-empty parts of near-equal size (``1 <= n <= len(c)``)."""
    parts, start = [], 0
    for i in range(n):
        end = start + (len(c) - start) // (n - i)
        parts.append(list(c[start:end]))
        start = end
    return parts


def ddmin(items: list[T], fails: Callable[[list[T]], bool], max_tests: int | None = None) -> DdminResult[T]:
    """Zeller & Hildebrandt's minimizing delta debugging, ``ddmin``.

    A. Zeller and R. Hildebrandt, "Simplifying and Isolating Failure-Inducing Input", IEEE Transactions
    on Software Engineering 28(2), 2002, pp. 183-200.

    Precondition: ``items`` itself fails (it is not tested again). Starting at granularity ``n = 2``,
    ``items`` is cut into ``n`` parts; the first failing part becomes the new configuration (``n = 2``),
    else the first failing complement (``n = max(n - 1, 2)``), else ``n`` doubles up to ``len``; when
    ``n == len`` and nothing fails, the configuration is 1-minimal. Subsets keep the order of ``items``.

    ``fails(candidate)`` is called at most once per distinct candidate (memoised by position in
    ``items``), never with the empty list, and at most ``max_tests`` times (``None``: no limit). When the
    budget runs out, the smallest failing set found so far is returned with ``exhausted=True`` and
    ``one_minimal=False``.

    Returns a :class:`DdminResult`. Raises ``ValueError`` for a negative ``max_tests``.
    """
    if max_tests is not None and max_tests < 0:
        raise ValueError(f"max_tests must be >= 0, not {max_tests}")
    memo: dict[tuple[int, ...], bool] = {}
    result = DdminResult(minimal=list(items))

    def test(c: list[int]) -> bool:
        key = tuple(c)
        if key in memo:
            return memo[key]
        if max_tests is not None and len(result.tests) >= max_tests:
            raise _Budget
        candidate = [items[i] for i in c]
        out = bool(fails(candidate))
        memo[key] = out
        result.tests.append((candidate, out))
        if out and len(c) < len(result.minimal):
            result.minimal = candidate
        return out

    c = list(range(len(items)))
    n = 2
    try:
        while len(c) >= 2:
            n = min(n, len(c))
            parts = _split(c, n)
            for part in parts:  # reduce to subset
                if test(part):
                    c, n = part, 2
                    break
            else:
                for part in parts:  # reduce to complement
                    drop = set(part)
                    complement = [i for i in c if i not in drop]
                    if test(complement):
                        c, n = complement, max(n - 1, 2)
                        break
                else:
                    if n >= len(c):
                        break  # 1-minimal
                    n = min(len(c), 2 * n)  # increase granularity
    except _Budget:
        result.exhausted, result.one_minimal = True, False
        return result
    result.minimal = [items[i] for i in c]
    return result


# --- reading a run ---------------------------------------------------------------------------------

def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{path}: missing")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from e


def schedule_of(run_dir: Path) -> list[dict]:
    """The run's concrete fault schedule ``[{"at_s": float (s), "f": str, "rng": str}]``, in order.

    Read from the invoke ops of ``run_dir/nemesis.jsonl`` (heal ops and ``info`` ops skipped). A run
    older than the ``rng`` key gets ``f"targets-{seed}-{i}"``, ``seed`` from ``test.json``'s
    ``config.seed`` and ``i`` the op's index among the invoke ops (the nemesis runner's key).

    Raises ``ValueError`` naming the file when ``nemesis.jsonl`` or ``test.json`` is missing or
    unreadable, an invoke op lacks ``planned_s``, or there is no invoke op.
    """
    run_dir = Path(run_dir)
    nem, test_json = run_dir / NEMESIS, run_dir / TEST
    if not nem.is_file():
        raise ValueError(f"{nem}: missing; is {run_dir} a run directory?")
    test = _read_json(test_json)
    seed = (test.get("config") or {}).get("seed")
    faults: list[dict] = []
    invokes = 0
    for lineno, line in enumerate(nem.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            op = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{nem}:{lineno}: not JSON ({e})") from e
        if op.get("type") != "invoke" or op.get("f") == "heal":
            continue
        i, invokes = invokes, invokes + 1
        if "planned_s" not in op:
            raise ValueError(f"{nem}:{lineno}: invoke op without planned_s")
        rng = op.get("rng")
        if rng is None:
            if seed is None:
                raise ValueError(f"{nem}:{lineno}: invoke op without rng and no config.seed in {test_json}")
            rng = f"targets-{seed}-{i}"
        faults.append({"at_s": float(op["planned_s"]), "f": op["f"], "rng": rng})
    if not faults:
        raise ValueError(f"{nem}: no fault was invoked; nothing to shrink")
    return faults


def failure_class(results: dict) -> frozenset[str]:
    """The definite anomaly names (``results["definite"]``) whose ``results["counts"]`` is > 0; names
    ending in ``-records`` (record counts of an anomaly, not a class) are dropped."""
    counts = results.get("counts") or {}
    return frozenset(a for a in results.get("definite") or ()
                     if not a.endswith("-records") and (counts.get(a) or 0) > 0)


def same_failure(target: frozenset, results: dict) -> bool:
    """The replay fails the same way: ``results["verdict"] == "invalid"`` and it shows at least one of
    the anomaly classes in ``target``."""
    return results.get("verdict") == "invalid" and bool(failure_class(results) & set(target))


# --- writing a replay ------------------------------------------------------------------------------

def write_schedule(faults: list[dict], path: Path) -> Path:
    """Write ``{"faults": [{"at_s", "f", "rng"}, ...]}`` (``at_s`` in s) to ``path`` for ``run
    --schedule``, creating its directory. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"faults": [{"at_s": f["at_s"], "f": f["f"], "rng": f["rng"]} for f in faults]}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def _drop_option(args: list[str], flag: str) -> list[str]:
    """``args`` without ``flag VALUE`` and ``flag=VALUE``."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def replay_command(base_replay: str, schedule_path: Path, test_name: str | None = None) -> str:
    """The original replay command with ``--nemesis`` dropped (``--nemesis X`` and ``--nemesis=X``),
    any ``--schedule`` replaced by ``--schedule schedule_path`` and, when ``test_name`` is given, any
    ``--test-name`` replaced by ``--test-name test_name``. Shell-quoted (``shlex.join``).

    Raises ``ValueError`` when ``base_replay`` cannot be split (unbalanced quotes) or is empty.
    """
    args = shlex.split(base_replay)
    if not args:
        raise ValueError("empty replay command")
    for flag in ("--nemesis", "--schedule") + (("--test-name",) if test_name else ()):
        args = _drop_option(args, flag)
    args += ["--schedule", str(schedule_path)]
    if test_name:
        args += ["--test-name", test_name]
    return shlex.join(args)


# --- the shrinking loop ----------------------------------------------------------------------------

def _describe(faults: list[dict]) -> str:
    return ", ".join(f"{f['f']}@{f['at_s']:g}s" for f in faults) or "(none)"


def _verdict_of(run_dir: Path | None) -> tuple[str, dict]:
    if run_dir is None:
        return "crashed", {}
    try:
        results = _read_json(Path(run_dir) / RESULTS)
    except ValueError:
        return "crashed", {}
    return str(results.get("verdict", "unknown")), results


def _failing_run(run_dir: Path) -> tuple[list[dict], frozenset[str], str]:
    """``(schedule, failure class, replay command)`` of the failing run in ``run_dir``.

    Raises ``ValueError`` when its files are missing or unreadable, its verdict is not ``invalid``, it
    shows no definite anomaly or its ``test.json`` has no replay command.
    """
    schedule = schedule_of(run_dir)
    results = _read_json(run_dir / RESULTS)
    verdict = results.get("verdict")
    if verdict != "invalid":
        raise ValueError(f"shrink needs a failing (invalid) run; {run_dir}'s verdict is {verdict}: "
                         "pick a run whose results.json says invalid (onceproof run until one fails)")
    target = failure_class(results)
    if not target:
        raise ValueError(f"{run_dir} is invalid but shows no definite anomaly to reproduce; nothing to shrink")
    base_replay = _read_json(run_dir / TEST).get("replay")
    if not base_replay:
        raise ValueError(f"{run_dir / TEST}: no replay command")
    return schedule, target, base_replay


def shrink(run_dir: Path, *, max_runs: int, out_dir: Path, run: Callable[[str], Path | None],
           echo: Callable[[str], None] = print, test_name: str | None = None) -> dict:
    """Shrink the failing run in ``run_dir`` to a 1-minimal fault schedule that fails the same way.

    ``run(command)`` executes one replay command line and returns the new run directory (``None`` if
    the run crashed); a replay fails when :func:`same_failure` holds for its ``results.json`` (a crash,
    or a missing ``results.json``, counts as passing). At most ``max_runs`` replays; candidate ``k``'s
    schedule is ``out_dir/candidates/<k>.json`` (``k`` from 1). ``test_name``, if given, is passed as
    ``--test-name`` to every replay. ``echo`` gets one progress line per replay.

    Writes and returns ``out_dir/shrink.json``: ``{"run_dir": str, "original": [fault], "failure_class":
    [str], "candidates": [{"faults", "command", "run_dir": str|None, "verdict", "fails": bool,
    "elapsed_s": float (s)}], "minimal": [fault], "one_minimal": bool, "runs": int, "replay": str}``,
    ``fault`` = ``{"at_s", "f", "rng"}``; rewritten after every replay, so an interrupted shrink keeps
    what it learned (``minimal`` then holds the smallest failing schedule so far, ``one_minimal`` false).
    ``replay`` replays ``minimal``, written to ``out_dir/minimal-schedule.json``.

    Raises ``ValueError`` when the run's files are missing or unreadable (see :func:`schedule_of`), its
    verdict is not ``invalid``, it shows no definite anomaly, or ``max_runs < 0``.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if max_runs < 0:
        raise ValueError(f"max_runs must be >= 0, not {max_runs}")
    schedule, target, base_replay = _failing_run(run_dir)

    out_dir.mkdir(parents=True, exist_ok=True)
    doc: dict = {"run_dir": str(run_dir), "original": schedule, "failure_class": sorted(target),
                 "candidates": [], "minimal": schedule, "one_minimal": False, "runs": 0, "replay": ""}

    def save() -> None:
        tmp = out_dir / (SHRINK_JSON + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(out_dir / SHRINK_JSON)

    def fails(faults: list[dict]) -> bool:
        k = doc["runs"] + 1
        command = replay_command(base_replay, write_schedule(faults, out_dir / "candidates" / f"{k}.json"),
                                 test_name)
        t0 = time.monotonic()
        new_dir = run(command)
        elapsed = round(time.monotonic() - t0, 2)
        verdict, res = _verdict_of(new_dir)
        failed = verdict == "invalid" and same_failure(target, res)
        doc["candidates"].append({"faults": faults, "command": command,
                                  "run_dir": None if new_dir is None else str(new_dir),
                                  "verdict": verdict, "fails": failed, "elapsed_s": elapsed})
        doc["runs"] = k
        if failed and len(faults) < len(doc["minimal"]):
            doc["minimal"] = faults
        echo(f"candidate {k}/{max_runs}: [{_describe(faults)}] -> {verdict}"
             f" ({'fails' if failed else 'passes'}) in {elapsed:.1f}s")
        save()
        return failed

    if len(schedule) < 2:
        echo(f"{run_dir}: the schedule has {len(schedule)} fault; nothing to shrink")
        minimal, one_minimal = schedule, True
    else:
        echo(f"shrinking {len(schedule)} faults of {run_dir} (failure class: {', '.join(sorted(target))}),"
             f" at most {max_runs} runs")
        res = ddmin(schedule, fails, max_tests=max_runs)
        minimal, one_minimal = res.minimal, res.one_minimal
    doc["minimal"], doc["one_minimal"] = minimal, one_minimal
    doc["replay"] = replay_command(base_replay, write_schedule(minimal, out_dir / MINIMAL_SCHEDULE), test_name)
    save()
    echo(f"minimal schedule ({len(minimal)} of {len(schedule)} faults"
         f"{'' if one_minimal else ', not proven 1-minimal: run budget spent'}): {_describe(minimal)}")
    echo(f"replay: {doc['replay']}")
    return doc
