"""The whole check against a real Kafka read of the same topics (issue 11, item 3: "≤ 1.3× the raw read,
measured against the actual fetch, not a loop without the network").

Run from the repo root::

    .venv/bin/python bench/real_read_ratio.py --records 2000000 --json bench/real_read_ratio.json

What it does, on a fresh ``onceproof cluster up`` (3 KRaft brokers on 127.0.0.1, stopped at the end):

1. produces the synthetic run of ``bench/whole_process.py`` (:class:`Feed`: ``--records`` input records
   over 10,000 keys on 6 partitions, and the output the eos sink would have written, with its provenance
   headers and the planted anomalies) into real ``input`` and ``output`` topics, each message to the
   partition and so the offset the feed gives it; the run directory gets the feed's ``history.jsonl``,
   ``sink.jsonl``, ``nemesis.jsonl`` and ``test.json``;
2. **raw read**: the three reads the check makes (input at read_committed, output at read_uncommitted,
   output at read_committed), each a bare confluent-kafka consumer assigned from offset 0 that calls
   ``consume(10000, topics.CONSUME_WAIT_S)`` (as ``read_topic`` does) until its position reaches the end
   offsets and only counts the messages:
   the fetch and librdkafka's decoding, nothing of ours;
3. **whole check**: ``onceproof.checking.checks.check_live`` on the same topics and run directory (reads in
   bounded chunks, decodes, saves the parquet snapshots, reads the history, runs every checker), as
   ``onceproof run``'s check phase does;
4. reports ``ratio = whole check s / raw read s`` (target ≤ 1.3) and fails (exit 1) unless the check
   finds exactly the planted anomalies (``Feed.expected``; no aborted records are produced, so nothing is
   hidden at read_committed).

Times are wall seconds in this process, one after the other, after a warm-up read of 1 message per topic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def produce(bootstrap: str, feed, topic: str) -> int:
    """Every message of ``feed``'s ``topic`` (its committed view) to its own partition, in order; n."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                  "compression.type": "none"})
    n = 0
    for batch in feed.messages(topic, committed=True):
        for m in batch:
            while True:
                try:
                    p.produce(topic, key=m.key(), value=m.value(), partition=m.partition(),
                              timestamp=m.timestamp()[1], headers=m.headers())
                    break
                except BufferError:
                    p.poll(0.05)
        n += len(batch)
        p.poll(0)
    if p.flush(300) != 0:
        raise RuntimeError(f"{topic}: records still unacknowledged after 300 s")
    return n


def raw_read(bootstrap: str, topic: str, committed: bool) -> tuple[int, float]:
    """(messages, seconds) of a bare read of ``topic`` from offset 0 to its end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from onceproof.clients import topics

    t0 = time.monotonic()
    ends = topics.end_offsets(bootstrap, topic, committed)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{time.time_ns()}", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.max.bytes": 64 * 1024 * 1024})
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    todo, n = {p for p, e in ends.items() if e > 0}, 0
    while todo:
        n += sum(1 for m in c.consume(10000, topics.CONSUME_WAIT_S) if m.error() is None)
        for tp in c.position([TopicPartition(topic, p) for p in list(todo)]):
            if tp.offset >= ends[tp.partition]:
                todo.discard(tp.partition)
    c.close()
    return n, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000, help="input records (output: about as many)")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, help="write the numbers here")
    a = ap.parse_args(argv)

    import pipeline_bench
    import whole_process
    from onceproof.checking import checks as checking
    from onceproof.checking.recovery import RecoveryStatus
    from onceproof.clients import topics

    feed = whole_process.Feed(a.records, a.keys, 6, a.seed)
    work = Path(tempfile.mkdtemp(prefix="onceproof-realread-"))
    cdir, run_dir = work / "cluster", work / "run"
    run_dir.mkdir()
    with pipeline_bench.cluster(cdir) as bootstrap:
        topics.create_topics(bootstrap, {"input": 6, "output": 6}, replication=3)
        t0 = time.monotonic()
        n_in, n_out = produce(bootstrap, feed, "input"), produce(bootstrap, feed, "output")
        produce_s = time.monotonic() - t0
        print(f"produced {n_in:,} input and {n_out:,} output records in {produce_s:.1f} s", flush=True)
        feed.write_run_files(run_dir)
        raw = {}
        for name, topic, committed in (("input", "input", True), ("output_uncommitted", "output", False),
                                       ("output", "output", True)):
            raw[name] = raw_read(bootstrap, topic, committed)
            print(f"raw read {name}: {raw[name][0]:,} messages in {raw[name][1]:.2f} s", flush=True)
        raw_s = sum(s for _, s in raw.values())
        st = RecoveryStatus(True, input_end=topics.end_offsets(bootstrap, "input", True),
                            output_lso=topics.end_offsets(bootstrap, "output", True),
                            output_hw=topics.end_offsets(bootstrap, "output", False))
        t0 = time.monotonic()
        result = checking.check_live(bootstrap, "input", "output", run_dir, st, workload="keyed")
        check_s = time.monotonic() - t0
        counts = {k: result["counts"].get(k) for k in feed.expected()}
        ok = counts == feed.expected()
        out = {"records": a.records, "input_records": n_in, "output_records": n_out, "produce_s": round(produce_s, 1),
               "raw_read_s": {k: round(s, 2) for k, (_, s) in raw.items()}, "raw_total_s": round(raw_s, 2),
               "raw_records_per_s": round(sum(n for n, _ in raw.values()) / raw_s),
               "check_s": round(check_s, 2), "ratio": round(check_s / raw_s, 2), "verdict": result["verdict"],
               "counts": counts, "counts_ok": ok, "loadavg": os.getloadavg()}
        print(f"\n| records | raw read s (3 reads) | whole check s | ratio (target ≤ 1.3) |\n|---|---|---|---|\n"
              f"| {a.records:,} | {raw_s:.1f} | {check_s:.1f} | **{check_s / raw_s:.2f}** |")
        print("planted anomalies found exactly" if ok else f"WRONG counts: {counts} != {feed.expected()}")
        if a.json:
            a.json.write_text(json.dumps(out, indent=1))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
