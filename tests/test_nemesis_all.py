"""Issue 3 on the real cluster: every fault type injected with evidence that it took effect, healed, the
cluster healthy afterwards; the eos sink stays valid under `--nemesis all`, the at-least-once sink is
caught; a seed replays the same schedule."""

import json

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster

FAULT_TYPES = {"kill-executor", "kill-driver", "kill-driver-in-commit-window", "kill-broker", "pause-broker",
               "commit-delay", "partition", "slow-network"}


def _completions(ops):
    return [o for o in ops if o["type"] == "info" and o.get("f") != "heal"]


def _check_evidence(op):
    """Per fault type, the evidence that says the fault really happened."""
    f, ev = op["f"].partition(":")[0], op["evidence"]
    if f == "kill-executor":
        assert ev["gone_after"] and ev["pid"] > 0
    elif f == "kill-driver":
        assert ev["driver_gone"]
    elif f == "kill-driver-in-commit-window":
        assert ev["offsets_logged"] and not ev["commit_logged_after_kill"] and ev["driver_gone"]
    elif f == "kill-broker":
        assert all(k["status_after"] == "gone" for k in ev["killed"].values())
        assert all(v is not None for v in ev["rejoined_after_s"].values()), ev
    elif f == "pause-broker":
        assert all(p["status_paused"] == "stopped" and p["status_resumed"] != "stopped"
                   for p in ev["paused"].values())
    elif f == "commit-delay":
        assert ev.get("delayed_commits") or ev.get("delayed_batches") or ev.get("abort"), ev
    elif f == "partition":
        assert ev["probe_before"]["ok"] and not ev["probe_during"]["ok"] and ev["probe_after"]["ok"]
    elif f == "slow-network":
        assert all(v for v in ev["active"].values()) and ev["probe_after"]["ok"]
    else:
        raise AssertionError(f"unexpected fault {f}")


@pytest.fixture(scope="module")
def all_runs(tmp_path_factory):
    runs = {}
    for sink in ("eos", "at-least-once"):
        root = tmp_path_factory.mktemp(sink)
        p = run_cli(["run", "--sink", sink, "--nemesis", "all", "--time-limit", "120", "--seed", "7",
                     "--results", str(root)], timeout=1500)
        run_dir, result, ops = load_run(root)
        runs[sink] = (p, run_dir, result, ops)
    return runs


def test_eos_is_valid_under_every_fault_type_with_evidence(all_runs):
    p, run_dir, result, ops = all_runs["eos"]
    assert p.returncode == 0, p.stdout[-5000:]
    assert result["verdict"] == "valid", result["counts"]
    effective = [o for o in _completions(ops) if o["outcome"] == "effective"]
    assert {o["f"].partition(":")[0] for o in effective} == FAULT_TYPES, result["faults"]
    for o in effective:
        _check_evidence(o)
    health = result["health_after_heal"]
    assert health["healthy"], health
    assert result["recovery"]["finished"]
    assert not our_processes(str(run_dir))


def test_at_least_once_is_caught_under_all_faults(all_runs):
    p, run_dir, result, ops = all_runs["at-least-once"]
    assert p.returncode == 1, p.stdout[-5000:]
    assert result["verdict"] == "invalid" and result["counts"]["duplicate"] > 0


def test_same_seed_same_schedule(all_runs):
    schedules = [json.loads((all_runs[s][1] / "test.json").read_text())["schedule"] for s in all_runs]
    assert schedules[0] == schedules[1]
    assert {f.partition(":")[0] for _, f in schedules[0]} == FAULT_TYPES
    executed = [[o["f"] for o in all_runs[s][3] if o["type"] == "invoke"] for s in all_runs]
    n = min(map(len, executed))
    assert n >= len(FAULT_TYPES) and executed[0][:n] == executed[1][:n]
