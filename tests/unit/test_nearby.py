"""Each anomaly example names the faults nearest in time."""

import pandas as pd

from onceproof.checkers.nearby import attach, fault_windows


def ops():
    return pd.DataFrame([
        {"index": 0, "type": "invoke", "f": "kill-broker:leader", "wall": 100.0},
        {"index": 1, "type": "info", "f": "kill-broker:leader", "outcome": "effective", "target": "b1", "wall": 110.0},
        {"index": 2, "type": "invoke", "f": "partition:client", "wall": 200.0},
        {"index": 3, "type": "info", "f": "partition:client", "outcome": "not-effective", "target": "b2",
         "wall": 201.0},
        {"index": 4, "type": "invoke", "f": "kill-driver", "wall": 300.0},
        {"index": 5, "type": "info", "f": "kill-driver", "outcome": "effective", "target": "driver", "wall": 300.5},
        {"index": 6, "type": "info", "f": "heal", "wall": 400.0},
    ])


def test_only_effective_faults_have_windows():
    w = fault_windows(ops())
    assert list(w["f"]) == ["kill-broker:leader", "kill-driver"]
    assert list(w["start_s"]) == [100.0, 300.0] and list(w["end_s"]) == [110.0, 300.5]


def test_examples_get_nearest_faults_by_record_time():
    out = pd.DataFrame({"partition": [0, 0, 1], "offset": [5, 6, 7], "timestamp": [105_000, 305_000, 112_000]})
    inp = pd.DataFrame({"partition": [2], "offset": [9], "timestamp": [290_000]})
    result = {"anomalies": {
        "duplicate": [{"key": "a", "seq": 1, "copies": [{"partition": 0, "offset": 5}, {"partition": 0, "offset": 6}]}],
        "nonmonotonic": [{"key": "b", "seq": 2, "partition": 1, "offset": 7}],
        "lost": [{"key": "c", "seq": 3, "input_partition": 2, "input_offset": 9}]}}
    attach(result, out, inp, ops(), k=1)
    dup = result["anomalies"]["duplicate"][0]["nemesis_nearby"][0]
    assert dup["f"] == "kill-driver" and dup["dt_s"] == -4.5          # last copy at 305 s, fault ended at 300.5 s
    nm = result["anomalies"]["nonmonotonic"][0]["nemesis_nearby"][0]
    assert nm["f"] == "kill-broker:leader" and nm["dt_s"] == -2.0
    lost = result["anomalies"]["lost"][0]["nemesis_nearby"][0]
    assert lost["f"] == "kill-driver" and lost["dt_s"] == 10.0        # fault came 10 s after the input record


def test_no_ops_or_no_timestamps_leaves_examples_alone():
    result = {"anomalies": {"lost": [{"key": "c", "seq": 3, "input_partition": 2, "input_offset": 9}]}}
    attach(result, None, None, None)
    assert "nemesis_nearby" not in result["anomalies"]["lost"][0]
    attach(result, pd.DataFrame(), pd.DataFrame(), ops())
    assert "nemesis_nearby" not in result["anomalies"]["lost"][0]


def test_a_history_of_heals_only_gives_no_windows_and_attach_leaves_examples_alone():
    """A run whose fault budget ran out before any fault was invoked logs only heals: the checker must
    not crash on the missing ``outcome`` column (seen: a run crashed with KeyError('outcome'))."""
    heals = pd.DataFrame([{"index": i, "type": "info", "f": "heal", "fault": f, "wall": 400.0 + i}
                          for i, f in enumerate(["kill-broker:one", "kill-executor"])])
    assert fault_windows(heals).empty
    result = {"anomalies": {"lost": [{"key": "c", "seq": 3, "input_partition": 2, "input_offset": 9}]}}
    assert attach(result, None, None, heals) == result
    assert "nemesis_nearby" not in result["anomalies"]["lost"][0]
