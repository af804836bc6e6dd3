"""Schedule shrinking: ddmin finds 1-minimal failing subsets within its budget, a run's schedule is read
back from nemesis.jsonl, replay commands swap --nemesis for --schedule, and shrink() drives replays to
the culprit fault. Pure: synthetic run directories, a fake `run`."""

from __future__ import annotations

import itertools
import json
import shlex
from pathlib import Path

import pytest

from onceproof.harness.shrink import (
    DdminResult,
    ddmin,
    failure_class,
    replay_command,
    same_failure,
    schedule_of,
    shrink,
    write_schedule,
)


class Counting:
    """A ``fails`` predicate that records every call."""

    def __init__(self, pred):
        self.pred, self.calls = pred, []

    def __call__(self, c):
        self.calls.append(list(c))
        return self.pred(c)


def assert_one_minimal(minimal, pred):
    assert pred(minimal)
    for i in range(len(minimal)):
        rest = minimal[:i] + minimal[i + 1:]
        if rest:
            assert not pred(rest), f"removing {minimal[i]!r} still fails"


# --- ddmin -----------------------------------------------------------------------------------------

def test_single_culprit_among_eight():
    pred = Counting(lambda c: 5 in c)
    r = ddmin(list(range(8)), pred)
    assert isinstance(r, DdminResult)
    assert r.minimal == [5] and r.one_minimal and not r.exhausted
    assert [c for c, _ in r.tests] == pred.calls
    assert all(out == (5 in c) for c, out in r.tests)
    assert len(pred.calls) <= 2 * 3 + 2  # logarithmic: about two tests per halving


def test_interacting_pair_among_eight():
    pred = Counting(lambda c: 1 in c and 6 in c)
    r = ddmin(list(range(8)), pred)
    assert r.minimal == [1, 6] and r.one_minimal
    assert_one_minimal(r.minimal, pred.pred)


@pytest.mark.parametrize("culprits", [{0}, {7}, {2, 3}, {0, 7}, {1, 4, 6}, {0, 1, 2, 3, 4, 5, 6, 7}])
def test_result_is_one_minimal_and_order_preserved(culprits):
    items = [f"f{i}" for i in range(8)]
    want = {f"f{i}" for i in culprits}
    pred = lambda c: want <= set(c)  # noqa: E731
    r = ddmin(items, pred)
    assert r.minimal == [x for x in items if x in want]  # input order
    assert r.one_minimal
    assert_one_minimal(r.minimal, pred)
    for c, _ in r.tests:
        assert c, "the empty list is never tested"
        assert c == sorted(c, key=items.index), "candidates keep the input order"


def test_order_preserved_for_unsortable_items():
    items = [{"f": "z"}, {"f": "a"}, {"f": "m"}, {"f": "b"}]
    r = ddmin(items, lambda c: {"f": "m"} in c and {"f": "z"} in c)
    assert r.minimal == [{"f": "z"}, {"f": "m"}]


def test_memoised_no_candidate_tested_twice():
    for a, b in itertools.combinations(range(8), 2):
        pred = Counting(lambda c, a=a, b=b: a in c and b in c)
        r = ddmin(list(range(8)), pred)
        keys = [tuple(c) for c in pred.calls]
        assert len(keys) == len(set(keys)), f"({a},{b}): a candidate was run twice"
        assert tuple(range(8)) not in keys, "the input itself is not re-tested"
        assert r.minimal == [a, b]


def test_max_tests_stops_and_returns_smallest_failing_so_far():
    pred = Counting(lambda c: 1 in c and 6 in c)
    r = ddmin(list(range(8)), pred, max_tests=3)
    assert len(pred.calls) == 3 and len(r.tests) == 3
    assert r.exhausted and not r.one_minimal
    failing = [c for c, out in r.tests if out] + [list(range(8))]
    assert r.minimal == min(failing, key=len)
    assert pred.pred(r.minimal)


def test_max_tests_zero_and_trivial_inputs():
    pred = Counting(lambda c: True)
    r = ddmin([1, 2, 3], pred, max_tests=0)
    assert pred.calls == [] and r.minimal == [1, 2, 3] and r.exhausted
    r = ddmin(["x"], pred)
    assert pred.calls == [] and r.minimal == ["x"] and r.one_minimal


def test_budget_large_enough_is_not_exhausted():
    pred = Counting(lambda c: 3 in c)
    full = ddmin(list(range(8)), pred)
    r = ddmin(list(range(8)), Counting(lambda c: 3 in c), max_tests=len(full.tests))
    assert r.minimal == [3] and not r.exhausted and r.one_minimal


# --- reading a run ---------------------------------------------------------------------------------

def write_run(d: Path, faults: list[tuple[float, str]], *, rng: bool, seed: int = 3, verdict="invalid",
              counts=None, replay="onceproof run --sink at-least-once --nemesis kill-executor,kill-driver --seed 3"):
    d.mkdir(parents=True, exist_ok=True)
    ops = []
    for i, (at, f) in enumerate(faults):
        inv = {"process": "nemesis", "type": "invoke", "f": f, "planned_s": at, "time": 1.0 + i, "wall": 2.0}
        if rng:
            inv["rng"] = f"targets-99-{i}"
        ops += [inv, {"process": "nemesis", "type": "info", "f": f, "outcome": "effective"}]
    ops.append({"process": "nemesis", "type": "info", "f": "heal", "outcome": "ok"})
    (d / "nemesis.jsonl").write_text("".join(json.dumps(o) + "\n" for o in ops))
    (d / "test.json").write_text(json.dumps({"config": {"seed": seed}, "replay": replay}))
    (d / "results.json").write_text(json.dumps({
        "verdict": verdict, "definite": ["duplicate", "lost-write", "duplicate-records"],
        "counts": counts if counts is not None else {"duplicate": 2, "duplicate-records": 4, "lost": 1}}))
    return d


FAULTS = [(12.5, "kill-broker:leader"), (20.0, "kill-executor"), (31.25, "kill-driver")]


def test_schedule_of_with_rng_keys(tmp_path):
    d = write_run(tmp_path / "r", FAULTS, rng=True)
    assert schedule_of(d) == [{"at_s": at, "f": f, "rng": f"targets-99-{i}"} for i, (at, f) in enumerate(FAULTS)]


def test_schedule_of_old_run_derives_rng_from_seed(tmp_path):
    d = write_run(tmp_path / "r", FAULTS, rng=False, seed=7)
    s = schedule_of(d)
    assert [x["rng"] for x in s] == ["targets-7-0", "targets-7-1", "targets-7-2"]
    assert [(x["at_s"], x["f"]) for x in s] == FAULTS
    assert all(x["f"] != "heal" for x in s)


def test_schedule_of_errors_name_the_file(tmp_path):
    d = write_run(tmp_path / "r", FAULTS, rng=True)
    (d / "test.json").unlink()
    with pytest.raises(ValueError, match="test.json"):
        schedule_of(d)
    d = write_run(tmp_path / "r2", FAULTS, rng=True)
    (d / "nemesis.jsonl").unlink()
    with pytest.raises(ValueError, match="nemesis.jsonl"):
        schedule_of(d)
    d = write_run(tmp_path / "r3", [], rng=True)
    with pytest.raises(ValueError, match="nemesis.jsonl"):
        schedule_of(d)


def test_failure_class_and_same_failure():
    res = {"verdict": "invalid", "definite": ["duplicate", "lost-write", "duplicate-records"],
           "counts": {"duplicate": 3, "duplicate-records": 5, "lost-write": 0, "lost": 9}}
    assert failure_class(res) == frozenset({"duplicate"})
    assert same_failure(frozenset({"duplicate", "aborted-read"}), res)
    assert not same_failure(frozenset({"lost-write"}), res)
    assert not same_failure(frozenset({"duplicate"}), {**res, "verdict": "unknown"})
    assert failure_class({"verdict": "crashed"}) == frozenset()


# --- replay commands -------------------------------------------------------------------------------

@pytest.mark.parametrize("nemesis", [["--nemesis", "kill-executor,kill-driver"], ["--nemesis=kill-executor"]])
def test_replay_command_swaps_nemesis_for_schedule(nemesis, tmp_path):
    base = shlex.join(["onceproof", "run", "--sink", "at-least-once", *nemesis, "--seed", "3",
                       "--test-name", "old", "--results", "/tmp/my results"])
    sched = tmp_path / "cand dir" / "1.json"
    args = shlex.split(replay_command(base, sched))
    assert not any(a == "--nemesis" or a.startswith("--nemesis=") for a in args)
    assert "kill-executor" not in " ".join(args)
    assert args[:4] == ["onceproof", "run", "--sink", "at-least-once"]
    assert args[args.index("--schedule") + 1] == str(sched)
    assert args[args.index("--seed") + 1] == "3" and "/tmp/my results" in args
    assert args[args.index("--test-name") + 1] == "old"
    args = shlex.split(replay_command(base, sched, test_name="shrunk"))
    assert args.count("--test-name") == 1 and args[args.index("--test-name") + 1] == "shrunk"


def test_replay_command_replaces_an_existing_schedule(tmp_path):
    args = shlex.split(replay_command("onceproof run --schedule=/old.json --seed 1", tmp_path / "new.json"))
    assert args == ["onceproof", "run", "--seed", "1", "--schedule", str(tmp_path / "new.json")]


def test_write_schedule_format(tmp_path):
    faults = [{"at_s": 12.5, "f": "kill-broker:leader", "rng": "targets-3-4"}]
    p = write_schedule(faults, tmp_path / "a" / "s.json")
    assert json.loads(p.read_text()) == {"faults": faults}


# --- shrink() end to end ---------------------------------------------------------------------------

class FakeRunner:
    """Runs a replay by reading its --schedule file: invalid (duplicate) iff the culprit is in it."""

    def __init__(self, root: Path, culprit: str, crash_on: int | None = None):
        self.root, self.culprit, self.crash_on, self.commands = root, culprit, crash_on, []

    def __call__(self, command: str) -> Path | None:
        self.commands.append(command)
        args = shlex.split(command)
        assert "--nemesis" not in args
        faults = json.loads(Path(args[args.index("--schedule") + 1]).read_text())["faults"]
        if self.crash_on == len(self.commands):
            return None
        bad = any(f["f"] == self.culprit for f in faults)
        d = self.root / f"run-{len(self.commands)}"
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps({
            "verdict": "invalid" if bad else "valid", "definite": ["duplicate"],
            "counts": {"duplicate": 1 if bad else 0}}))
        return d


SIX = [(5.0 * (i + 1), f) for i, f in enumerate(
    ["kill-executor", "kill-driver", "kill-broker:leader", "partition", "pause-executor", "clock-skew"])]


def test_shrink_finds_the_culprit(tmp_path):
    run_dir = write_run(tmp_path / "orig", SIX, rng=True)
    runner, lines = FakeRunner(tmp_path / "runs", "partition"), []
    out = tmp_path / "shrink"
    doc = shrink(run_dir, max_runs=50, out_dir=out, run=runner, echo=lines.append)
    culprit = {"at_s": 20.0, "f": "partition", "rng": "targets-99-3"}
    assert doc["minimal"] == [culprit] and doc["one_minimal"]
    assert doc["failure_class"] == ["duplicate"]
    assert doc["original"] == schedule_of(run_dir)
    saved = json.loads((out / "shrink.json").read_text())
    assert saved == doc
    assert doc["runs"] == len(runner.commands) == len(doc["candidates"])
    for k, (cand, command) in enumerate(zip(doc["candidates"], runner.commands), 1):
        assert cand["command"] == command
        assert json.loads((out / "candidates" / f"{k}.json").read_text())["faults"] == cand["faults"]
        assert cand["fails"] == any(f["f"] == "partition" for f in cand["faults"])
        assert cand["verdict"] == ("invalid" if cand["fails"] else "valid")
        assert cand["elapsed_s"] >= 0 and cand["run_dir"]
    assert sum(1 for ln in lines if ln.startswith("candidate ")) == doc["runs"]
    assert json.loads((out / "minimal-schedule.json").read_text()) == {"faults": [culprit]}
    args = shlex.split(doc["replay"])
    assert args[args.index("--schedule") + 1] == str(out / "minimal-schedule.json")
    assert "--nemesis" not in args and args[args.index("--seed") + 1] == "3"


def test_shrink_budget_crash_and_progressive_save(tmp_path):
    run_dir = write_run(tmp_path / "orig", SIX, rng=False)
    seen = []

    class Watching(FakeRunner):
        def __call__(self, command):
            if self.commands:  # shrink.json already records every earlier candidate
                seen.append(len(json.loads((tmp_path / "out" / "shrink.json").read_text())["candidates"]))
            return super().__call__(command)

    runner = Watching(tmp_path / "runs", "kill-driver", crash_on=2)
    doc = shrink(run_dir, max_runs=3, out_dir=tmp_path / "out", run=runner, echo=lambda s: None)
    assert doc["runs"] == 3 == len(runner.commands) and not doc["one_minimal"]
    assert seen == [1, 2]
    first, crashed = doc["candidates"][:2]
    assert first["fails"] and first["faults"] == schedule_of(run_dir)[:3]  # the half with the culprit
    assert crashed["verdict"] == "crashed" and not crashed["fails"] and crashed["run_dir"] is None
    assert doc["minimal"] == min((c["faults"] for c in doc["candidates"] if c["fails"]), key=len)
    assert {"at_s": 10.0, "f": "kill-driver", "rng": "targets-3-1"} in doc["minimal"]


def test_shrink_single_fault_is_trivial(tmp_path):
    run_dir = write_run(tmp_path / "orig", SIX[:1], rng=True)
    runner = FakeRunner(tmp_path / "runs", "kill-executor")
    doc = shrink(run_dir, max_runs=10, out_dir=tmp_path / "out", run=runner, echo=lambda s: None)
    assert runner.commands == [] and doc["runs"] == 0 and doc["minimal"] == schedule_of(run_dir)
    assert (tmp_path / "out" / "shrink.json").is_file()


@pytest.mark.parametrize("verdict", ["valid", "unknown", "crashed"])
def test_shrink_refuses_a_run_that_did_not_fail(tmp_path, verdict):
    run_dir = write_run(tmp_path / "orig", SIX, rng=True, verdict=verdict, counts={})
    runner = FakeRunner(tmp_path / "runs", "partition")
    with pytest.raises(ValueError, match=f"needs a failing \\(invalid\\) run; .*verdict is {verdict}"):
        shrink(run_dir, max_runs=10, out_dir=tmp_path / "out", run=runner, echo=lambda s: None)
    assert runner.commands == []
