"""The KAFKA-17754 hunt in the pipeline (issue 29; ``docs/kafka17754.md``), on the real local cluster:
``delay-txn-requests:endtxn`` holds about half the connections to the transaction coordinator of a
transactional.id the sink is using, past librdkafka's ``socket.timeout.ms`` (60 s), so EndTxn(COMMIT) is sent
again and the held copy arrives after the resend was answered.

* eos (a producer and ``init_transactions()`` per task attempt, so every transaction has its own epoch) stays
  ``valid``: every turn effective, one at least exercised (a commit held ≥ 20 s or a failed attempt), and
  never a producer reused.

About 4 minutes on 2 cores (222 s measured: two turns of about 70 s, and the recovery).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended]


@pytest.mark.timeout(1500)
def test_eos_stays_valid_when_a_commit_is_held_past_its_resend(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", "delay-txn-requests:endtxn", "--time-limit", "150",
                 "--seed", "1", "--results", str(results_root)], timeout=1400)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result["counts"], result.get("unknown_reasons"),
                                                                p.stdout[-3000:])
    turns = [o for o in ops if o["type"] == "info" and o["f"] == "delay-txn-requests:endtxn"]
    assert turns and all(o["outcome"] == "effective" for o in turns), [o["evidence"] for o in turns]
    assert any(o["exercised"] for o in turns), [o["evidence"]["sink_events_held"] for o in turns]
    for o in turns:
        ev = o["evidence"]
        assert ev["toxic"]["direction"] == "upstream" and ev["held_s"] >= ev["hold_s"] - 1, ev
        assert ev["stretch"]["paths"] and ev["node"] not in {int(q.split("-")[1]) for q in ev["stretch"]["paths"]}
    events = [json.loads(ln) for ln in (run_dir / "sink.jsonl").read_text().splitlines() if ln.strip()]
    assert not [e for e in events if e["event"].startswith("producer-")], "the eos sink reused a producer"
    assert result["health_after_heal"]["healthy"], result["health_after_heal"]
    assert not our_processes(str(run_dir))
