"""A user's own pipeline under test (issue 9): ``onceproof run --pipeline-cmd`` certifies
``examples/user_pipeline.py``, a plain PySpark script that writes through the exactly-once sink library
(``pipeline/eos_sink.py``), under executor kills and the hook-free commit-window kill.

What must hold, on the real local cluster:

* the verdict is ``valid`` with every input record in the output once;
* ``kill-driver-in-commit-window`` found the window from outside (``mode: watch``): ``offsets/N`` present,
  ``commits/N`` absent at the kill and after it, the output's LSO grown between ``offsets/N`` and the
  kill; the driver was restarted (the same command, the same checkpoint) and batch N committed later;
* ``kill-executor`` killed the executor holding a sink task (the library honours the harness's
  pre-commit hook through ``ONCEPROOF_CONTROL_DIR``), and another attempt committed it;
* the executors' logs were collected although the script announces no Spark application id;
* nothing of the run is left running.

About 2.5 minutes on 2 cores.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_run, our_processes, run_cli

# make test-extended (243 s): make test watches a user job's commit window in test_user_outputs.py and
# kills a user job's executors in test_user_certificate.py's test-all
pytestmark = [pytest.mark.cluster, pytest.mark.extended]

CMD = ("{python} examples/user_pipeline.py --bootstrap {bootstrap} --input-topic {input_topic} "
       "--output-topic {output_topic} --checkpoint {checkpoint} --jars {jars}")


@pytest.mark.timeout(900)
def test_the_example_user_pipeline_is_certified_under_the_generic_commit_window_kill(results_root):
    p = run_cli(["run", "--pipeline-cmd", CMD, "--nemesis", "kill-driver-in-commit-window,kill-executor",
                 "--seed", "1", "--results", str(results_root)], timeout=840)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "valid", result
    assert all(n == 0 for n in result["counts"].values()), result["counts"]
    st = result["stats"]
    assert st["input_records"] == st["output_records"] > 1000, st
    test = json.loads((run_dir / "test.json").read_text())
    assert test["config"]["pipeline_cmd"] == CMD and run_dir.parent.name.startswith("user_pipeline-")

    done = {o["f"]: o for o in ops if o.get("type") == "info" and o.get("f") != "heal"}
    cw = done["kill-driver-in-commit-window"]
    ev = cw["evidence"]
    assert cw["outcome"] == "effective", cw
    assert ev["mode"] == "watch", ev
    assert ev["offsets_logged"] and not ev["commit_logged_at_kill"] and not ev["commit_logged_after_kill"], ev
    assert any(ev["output_end_at_kill"][p] > off for p, off in ev["output_end_at_offsets_logged"].items()), ev
    assert (run_dir / "checkpoint" / "commits" / str(ev["batch"])).exists(), "the replayed batch never committed"
    assert result["driver_restarts"] >= 1
    assert (run_dir / "logs" / "driver-2.log").exists()

    ke = done["kill-executor"]
    assert ke["outcome"] == "effective" and ke["exercised"], ke
    assert ke["evidence"]["aim"] == "executor holding a sink task", ke["evidence"]
    assert ke["evidence"]["retried_by"] is not None, ke["evidence"]

    assert list((run_dir / "logs" / "executors").glob("app-*/*/stderr*")), "no executor log collected"
    assert not our_processes(str(run_dir)), "processes of the run left running"
