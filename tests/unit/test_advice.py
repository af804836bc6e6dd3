"""The "likely cause → fix" line of each anomaly (``checkers/advice.py``), on synthetic results: it names
what the evidence supports and no more."""

from __future__ import annotations

from onceproof.checkers import advice


def _result(counts: dict, anomalies: dict | None = None) -> dict:
    return {"counts": counts, "anomalies": anomalies or {}}


def test_aborted_input_records_point_at_the_sources_isolation_level():
    a = advice.advise(_result({"aborted-input-read": 3, "lost": 0}))
    assert set(a) == {"aborted-input-read"}
    assert "kafka.isolation.level" in a["aborted-input-read"]["fix"] and "KIP-98" in a["aborted-input-read"]["source"]


def test_a_duplicate_says_replayed_batch_only_when_the_evidence_shows_one():
    same_batch = {"duplicate": [{"key": "k", "seq": 1, "copies": [{"batch": "7"}, {"batch": "7"}]}]}
    near_kill = {"duplicate": [{"key": "k", "seq": 1, "copies": [{}, {}],
                                "nemesis_nearby": [{"f": "kill-driver-in-commit-window", "dt_s": -1.0}]}]}
    bare = {"duplicate": [{"key": "k", "seq": 1, "copies": [{}, {}]}]}
    causes = [advice.advise(_result({"duplicate": 1}, ex))["duplicate"]["cause"]
              for ex in (same_batch, near_kill, bare)]
    assert "same batchId" in causes[0]
    assert "kill-driver-in-commit-window" in causes[1] and "likely" in causes[1]
    assert "replay" not in causes[2], causes[2]
    assert all("batchId" in advice.advise(_result({"duplicate": 1}, ex))["duplicate"]["fix"]
               for ex in (same_batch, near_kill, bare))


def test_a_loss_names_failondataloss_only_after_a_deletion():
    deleted = {"lost": [{"key": "k", "seq": 1, "nemesis_nearby": [{"f": "delete-input-records", "dt_s": -2.0}]}]}
    assert "failOnDataLoss" in advice.advise(_result({"lost": 4}, deleted))["lost"]["fix"]
    assert "failOnDataLoss" in advice.advise(_result({"lost-deleted": 2}))["lost-deleted"]["fix"]
    assert "failOnDataLoss" not in advice.advise(_result({"lost": 4}, {"lost": [{"key": "k"}]}))["lost"]["fix"]


def test_nothing_found_nothing_advised_and_a_line_reads_cause_fix_source():
    assert advice.advise(_result({"duplicate": 0, "lost": 0, "unexpected": 0})) == {}
    entry = advice.advise(_result({"unexpected": 1}))["unexpected"]
    line = advice.line(entry)
    assert line.startswith("likely cause: ") and " → fix: " in line and line.endswith(f"({entry['source']})")


def test_a_query_that_stopped_on_deleted_input_is_not_told_to_set_what_it_has():
    stopped = {"verdict": "unknown", "counts": {"lost": 5, "lost-deleted": 2, "no-recovery": 1},
               "query_stopped": "KAFKA_DATA_LOSS ... (driver-2.log)",
               "anomalies": {"lost": [{"nemesis_nearby": [{"f": "delete-input-records"}]}]}}
    a = advice.advise(stopped)
    assert "stopped on the loss" in a["lost-deleted"]["cause"] and "failOnDataLoss=true" not in a["lost-deleted"]["fix"]
    assert "stopped on the loss" in a["lost"]["cause"] and "the query stopped" in a["no-recovery"]["cause"]
    assert "lost" not in advice.advise({"verdict": "unknown", "counts": {"lost": 5}, "anomalies": {}})
    invalid = dict(stopped, verdict="invalid")  # no-recovery made it invalid: still the stopped query's advice
    assert "stopped on the loss" in advice.advise(invalid)["lost"]["cause"]


def test_duplicates_next_to_a_held_produce_name_kip_890_and_the_release_that_fixed_it():
    def near(*fs):
        return {"duplicate": [{"key": "k", "seq": i, "copies": [{}, {}], "nemesis_nearby": [{"f": f, "dt_s": 0.0}]}
                              for i, f in enumerate(fs)]}
    a = advice.advise(_result({"duplicate": 2}, near("delay-txn-requests:expired-produce",
                                                     "delay-txn-requests:produce")))["duplicate"]
    assert "KIP-890" in a["source"] and "3.6" in a["fix"] and "message.timeout.ms" in a["cause"]
    for other in (near("delay-txn-requests:endtxn"), near("delay-txn-requests:expired-produce", "kill-driver")):
        assert "KIP-890" not in advice.advise(_result({"duplicate": 2}, other))["duplicate"]["source"]
