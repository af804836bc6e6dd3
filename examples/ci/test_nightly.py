"""A user's nightly onceproof tests: the exactly-once sink must survive its faults, and Spark's at-least-once
Kafka sink must be caught by the same faults (the harness's own proof that it can fail a pipeline).

Run with ``pytest examples/ci/test_nightly.py --onceproof-backend docker --onceproof-results results/ci
--junitxml results/ci/junit.xml`` (``nightly.yml`` does). ``--onceproof-backend local`` (or no option: local
is the default) runs the same tests on local processes; nothing in this file names the backend.

Each ``onceproof_run()`` is a whole run on its own fresh cluster (3-6 min here); its verdict, anomaly counts
and report path are in the test's JUnit ``<properties>`` (``onceproof.*``), and a verdict the test does not
expect fails it with one paragraph naming the anomalies and the report.
"""

import pytest

# Both tests run the same seeded faults: the driver killed after the sink wrote a batch and before Spark
# logged its commit (so the batch is replayed), and an executor killed while its sink task is writing.
FAULTS = dict(nemesis="kill-driver-in-commit-window,kill-executor", time_limit=60, seed=1)


@pytest.mark.onceproof(sink="eos", **FAULTS)
def test_exactly_once_sink_is_valid_under_faults(onceproof_run):
    result = onceproof_run()  # expect="valid" is the default: invalid or unknown fails this test
    assert result.counts.get("duplicate") == 0 and result.counts.get("lost") == 0


@pytest.mark.onceproof(sink="at-least-once", expect="invalid", **FAULTS)
def test_at_least_once_sink_is_caught_duplicating(onceproof_run):
    result = onceproof_run()  # passes only when the checker catches the at-least-once sink
    assert result.counts["duplicate"] > 0, result.counts
