"""A valid verdict needs traffic and every planned fault exercised (issue 7 item 5 and 7)."""

from onceproof.nemesis import coverage

PLAN = [(5.0, "kill-executor"), (15.0, "kill-broker:leader"), (30.0, "kill-executor")]
VALID = {"verdict": "valid", "valid": True, "unknown_reasons": [],
         "stats": {"input_records": 100, "output_records": 100}}


def _op(f, outcome="effective", exercised=True):
    return {"type": "info", "f": f, "outcome": outcome, "exercised": exercised}


def test_every_fault_exercised_stays_valid_and_tabulates():
    ops = [{"type": "invoke", "f": "kill-executor"}, _op("kill-executor"), _op("kill-broker:leader"),
           _op("kill-executor", "skipped", False)]
    r = coverage.judge(VALID, PLAN, ops)
    assert r["verdict"] == "valid"
    rows = {(c["fault"], c["target"]): c for c in r["coverage"]}
    assert rows[("kill-executor", "-")] == {"fault": "kill-executor", "target": "-", "planned": 2, "invoked": 2,
                                            "effective": 1, "exercised": 1, "other": {"skipped": 1}}
    assert rows[("kill-broker", "leader")]["exercised"] == 1


def test_effective_but_not_exercised_is_unknown():
    ops = [_op("kill-executor"), _op("kill-broker:leader", exercised=False)]
    r = coverage.judge(VALID, PLAN, ops)
    assert r["verdict"] == "unknown"
    assert any(x.startswith("fault-not-exercised: kill-broker:leader") for x in r["unknown_reasons"])


def test_planned_but_never_run_is_unknown():
    r = coverage.judge(VALID, PLAN, [_op("kill-executor")])
    assert r["verdict"] == "unknown" and "invoked 0" in " ".join(r["unknown_reasons"])


def test_no_traffic_is_unknown_even_without_faults():
    r = coverage.judge({**VALID, "stats": {"input_records": 0, "output_records": 0}}, [], [])
    assert r["verdict"] == "unknown" and r["unknown_reasons"][0].startswith("no-traffic")


def test_invalid_stays_invalid_with_warnings():
    r = coverage.judge({**VALID, "verdict": "invalid", "valid": False}, PLAN, [])
    assert r["verdict"] == "invalid" and r["coverage_warnings"]


def test_offline_recheck_applies_the_same_coverage_judgement(tmp_path):
    """`onceproof check RUN_DIR` must not turn a run that never exercised a planned fault into valid."""
    import json

    from onceproof.checking import checks as checking
    from tests.unit.test_report import make_run

    d = make_run(tmp_path / "run")
    base = checking.check_saved(d)
    ops = [{"process": "nemesis", "type": "info", "f": "kill-executor", "outcome": "effective",
            "exercised": True, "target": "executor 1", "evidence": {}, "time": 1, "index": 0, "wall": 1.0},
           {"process": "nemesis", "type": "info", "f": "kill-driver-in-commit-window", "outcome": "effective",
            "exercised": False, "target": "driver", "evidence": {}, "time": 2, "index": 1, "wall": 2.0}]
    (d / "nemesis.jsonl").write_text("".join(json.dumps(o) + "\n" for o in ops))
    r = checking.check_saved(d)
    if base["verdict"] == "valid":  # the synthetic run may carry planted anomalies: then it stays invalid
        assert r["verdict"] == "unknown"
        assert any(x.startswith("fault-not-exercised: kill-driver-in-commit-window") for x in r["unknown_reasons"])
    else:
        assert r["verdict"] == base["verdict"] and r["coverage_warnings"]
    rows = {c["fault"]: c for c in r["coverage"]}
    assert rows["kill-executor"]["exercised"] == 1 and rows["kill-driver-in-commit-window"]["exercised"] == 0


def test_txn_timeout_evidence_accepts_the_sinks_abandon_event(tmp_path):
    """The sink logs a transaction fenced after transaction.timeout.ms as `abandon` (not `abort`): the
    fault must still see its evidence (it was judged not-effective in every `all` run before)."""
    import json
    import threading

    from onceproof.nemesis.commit_delay import CommitDelay
    from onceproof.nemesis.fault import NemesisContext

    control = tmp_path / "control"
    control.mkdir()
    now = __import__("time").time()
    events = [{"event": "hold", "batch": 27, "partition": 0, "attempt": 0, "txn_id": "s-0", "time": now + 1},
              {"event": "abandon", "batch": 27, "partition": 0, "attempt": 0, "kind": "fatal",
               "error": "_FENCED", "time": now + 2},
              {"event": "commit", "batch": 27, "partition": 0, "attempt": 1, "time": now + 3}]
    (tmp_path / "sink.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    ctx = NemesisContext(spark=None, control=control, checkpoint=tmp_path, stop=threading.Event())
    out = CommitDelay("txn-timeout", txn_timeout_ms=100)._txn_timeout(ctx, tmp_path, now)
    assert out.outcome == "effective", out.evidence
    assert out.evidence["abort"]["event"] == "abandon" and out.evidence["retried_by_attempt"] == 1


def test_an_unexercised_fault_carries_its_own_reasons_once_each():
    why = "broker 2 was not back in every ISR within 90 s (input:3)"
    ops = [_op("kill-executor"), {**_op("kill-broker:leader", "not-effective", False), "evidence": {"reason": why}},
           {**_op("kill-broker:leader", "not-effective", False), "evidence": {"reason": why}},
           {**_op("kill-executor", "skipped", False), "evidence": {"reason": "not mine"}}]
    r = coverage.judge(VALID, PLAN, ops)
    line = [x for x in r["unknown_reasons"] if x.startswith("fault-not-exercised: kill-broker:leader")]
    assert line == [f"fault-not-exercised: kill-broker:leader (planned 1, invoked 2: not-effective=2): {why}"]
    assert coverage.why_not(ops, "kill-executor") == ["not mine"]


def test_a_workload_that_stopped_sending_makes_a_valid_run_unknown():
    ops = [_op("kill-executor"), _op("kill-broker:leader")]
    r = coverage.judge(VALID, PLAN, ops, "16:33:27 TypeError('x')")
    assert r["verdict"] == "unknown" and r["unknown_reasons"][0].startswith("workload-stopped")
    assert "16:33:27 TypeError('x')" in r["unknown_reasons"][0]
    invalid = {**VALID, "verdict": "invalid", "valid": False}
    assert coverage.judge(invalid, PLAN, ops, "16:33:27 TypeError('x')")["verdict"] == "invalid"


def test_a_recheck_reads_the_stop_the_run_recorded(tmp_path):
    import json

    from onceproof.checking.checks import stored_workload_stop

    assert stored_workload_stop(tmp_path) is None  # no results.json
    # a fatal line past client_errors' first 50 is cut from the record; the structured field is not
    (tmp_path / "results.json").write_text(json.dumps({
        "client_errors": {"workload": ["16:31:35 127.0.0.1:19142/2: Connect to ipv4#127.0.0.1:19142 failed"] * 50},
        "workload_stopped": "16:33:27 TypeError(\"'>=' not supported\")"}))
    assert stored_workload_stop(tmp_path) == "16:33:27 TypeError(\"'>=' not supported\")"
    (tmp_path / "results.json").write_text(json.dumps({"client_errors": {"workload": []}}))
    assert stored_workload_stop(tmp_path) is None
    (tmp_path / "results.json").write_text("{not json")
    assert stored_workload_stop(tmp_path) is None
