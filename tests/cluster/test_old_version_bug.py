"""A real exactly-once defect of an old Kafka release, caught through a pipeline's output (issue 43, item 5).

Before KIP-890 part 1 (Kafka 3.6: the partition leader verifies with the transaction coordinator that a
transactional Produce belongs to an ongoing transaction, ``transaction.partition.verification.enable``), a
Produce that the client gave up on (``message.timeout.ms``) and that reaches its leader after the
transaction's abort is taken as the start of a new transaction of that producer id, and the next
transaction's commit marker commits it (``docs/kafka17754.md``; the client-level probe showed it first).

The job is ``examples/driver_txn_pipeline.py`` with the retry confluent-kafka's transactions example teaches
(``--retry-aborted 3``: abort, then write the batch again with the same producer) and a 10-s message timeout,
the sink's at ``--txn-timeout-ms 15000`` (the fault's hold is that timeout and 8 s). The fault,
``delay-txn-requests:expired-produce``, moves the input topic's and the coordinators' leadership off one
output partition's leader, then holds every client connection of it for 18 s: the job's records there
expire in the network, it aborts and writes the batch again, and the removal hands the held Produce on.

* Kafka 3.5.2: ``invalid`` with ``duplicate`` (the expired copy committed beside the rewrite), the fault
  exercised (records produced during the hold appended at its removal: ``held_writes``);
* Kafka 4.4.0, the same job, seed and schedule: ``valid``.

Both sides are in ``make test``, about 110 s each. Measured 2026-11-30: eight runs of the 3.5.2 side by
hand, every one invalid with duplicates (105-1,893); one failed this test's evidence check, its first turn
holding a broker the metadata still showed leading the input just after the election, and the fault now
waits until the moved leadership has left (``leadership_s``, 0.6-0.7 s); the five runs after that passed.
"""

from __future__ import annotations

import pytest

from tests.conftest import NEWEST_KAFKA, load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster

OLD_KAFKA = "3.5.2"
JOB = ("{python} examples/driver_txn_pipeline.py --bootstrap {bootstrap} --input-topic {input_topic} "
       "--output-topic {output_topic} --checkpoint {checkpoint} --jars {jars} --retry-aborted 3 "
       "--message-timeout-ms 10000")


def _run(results, kafka: str) -> tuple[dict, list[dict], str]:
    p = run_cli(["run", "--kafka-version", kafka, "--pipeline-cmd", JOB,
                 "--nemesis", "delay-txn-requests:expired-produce", "--txn-timeout-ms", "15000",
                 "--time-limit", "90", "--seed", "3", "--results", str(results)], timeout=1200)
    out = p.stdout + p.stderr
    assert p.returncode != 254, out[-3000:]
    run_dir, result, ops = load_run(results)
    assert not our_processes(str(run_dir)), "a process of the run outlived it"
    assert (result.get("versions") or {}).get("kafka") == kafka, result.get("versions")
    turns = [o for o in ops if o.get("type") == "info" and o.get("f") == "delay-txn-requests:expired-produce"]
    held = [t for t in turns if t["exercised"]]
    assert held, (turns, out[-3000:])
    for t in held:  # every connection held, the input's and coordinators' leaders elsewhere, writes held
        ev = t["evidence"]
        assert ev["toxic"]["toxicity"] == 1.0 and ev["held_writes"] and not ev["leads_input"], ev
    return result, turns, out


@pytest.mark.timeout(1500)
def test_an_expired_produce_is_committed_by_the_retry_on_kafka_before_3_6(tmp_path):
    result, _, out = _run(tmp_path / "old", OLD_KAFKA)
    assert result["verdict"] == "invalid" and result["counts"]["duplicate"] > 0, (result["counts"], out[-3000:])
    assert "KIP-890" in result["advice"]["duplicate"]["source"], result["advice"]


@pytest.mark.timeout(1500)
def test_the_same_job_and_schedule_are_valid_on_the_newest_kafka(tmp_path):
    result, _, out = _run(tmp_path / "new", NEWEST_KAFKA)
    assert result["verdict"] == "valid", (result["counts"], out[-3000:])
