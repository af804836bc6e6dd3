"""The cluster half of ``tests/unit/test_pytest_plugin.py``: tests that need a local cluster or Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO, load_run_dir, our_jvms
from tests.unit.test_pytest_plugin import junit_cases, plugin_args, properties  # noqa: F401 (fixtures are used by name)

pytest_plugins = ["pytester"]  # also when this module runs without tests/unit (make test-extended)


@pytest.mark.cluster
@pytest.mark.extended  # 107 s; make test's 50 minutes: the plugin's expectations are unit-tested, and
# test_wheel_install.py runs a real run through the installed plugin
@pytest.mark.timeout(1500)
def test_a_real_mutant_run_killed_in_its_commit_window_passes_a_test_that_expects_invalid(pytester, monkeypatch):
    """A user's test file in its own pytest process: the mutant transactional sink without its replay
    marker (``eos-no-marker``), with the driver killed after the sink committed a batch and before Spark
    logged its commit, must be caught (verdict invalid, the replayed batch committed twice), so a test
    expecting ``invalid`` passes, with the verdict in its JUnit entry and no JVM left behind. The run leases
    the session's warm cluster (``--onceproof-warm-cluster``), whose brokers are gone with the session.
    (Spark's at-least-once sink is caught the same way in ``tests/test_docker_backend.py``.)"""
    pytester.makepyfile(test_mutant="""
        import pytest

        @pytest.mark.onceproof(sink="eos-no-marker", nemesis="kill-driver-in-commit-window", time_limit=20,
                               seed=3, expect="invalid")
        def test_the_mutant_is_caught(onceproof_run):
            r = onceproof_run()
            assert r.counts["duplicate"] > 0, r.counts
            assert r.report is not None and r.report.is_file()
    """)
    results = pytester.path / "results"
    junit = pytester.path / "junit.xml"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--onceproof-results={results}",
                                        f"--junitxml={junit}", "--onceproof-warm-cluster", *plugin_args(),
                                        timeout=1400)
    res.assert_outcomes(passed=1)
    props = properties(junit_cases(junit)["test_the_mutant_is_caught"])
    assert (props["onceproof.verdict"], props["onceproof.expected"]) == ("invalid", "invalid"), props
    assert int(props["onceproof.count.duplicate"]) > 0, props
    assert Path(props["onceproof.report"]).is_file(), props
    # the run itself (this was test_e2e's mutant run, folded in to save a cluster): a batch the driver kill
    # made Spark replay is among the duplicated copies, named by its batchId, and both copies were
    # committed transactions (fencing alone does not stop a replay from committing again)
    _, result, ops = load_run_dir(Path(props["onceproof.report"]).parent)
    assert result["cluster"]["warm"] is True, result["cluster"]
    replayed = {str(o["evidence"]["batch"]) for o in ops if o.get("outcome") == "effective"}
    assert replayed, ops
    copies = [c for ex in result["anomalies"]["duplicate"] for c in ex["copies"]]
    assert {c["batch"] for c in copies} & replayed, (copies, replayed)
    assert all(c.get("sink") == "eos" and c.get("txn_id") for c in copies), copies
    assert not our_jvms(str(results)), "JVMs of the run outlived it"
    assert not our_jvms(str(pytester.path)), "the warm cluster's brokers outlived the session"


