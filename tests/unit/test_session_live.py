"""A session's live snapshot and its view (``onceproof watch``), on synthetic data: the running anomaly
counts agree with the after-the-run checker on the same rows, the rates, the panels, and the view's keys
sending the same spool commands as ``onceproof nemesis`` / ``heal``."""

import asyncio
import json
import random
import time

import psutil

from onceproof.checkers import transactions
from onceproof.clients.live_reader import frame
from onceproof.harness.session import live
from onceproof.harness.session.live import LiveCounts, Rate
from onceproof.harness.session.spool import Spool
from onceproof.harness.session.state import SessionState, find
from tests.unit.test_transactions_checker import sink_log


def row(p, o, key, seq, batch=1, attempt=0, sink_partition=0, incarnation="1", op_input=None):
    hdrs = [("op.batch", str(batch).encode()), ("op.sink_partition", str(sink_partition).encode()),
            ("op.attempt", str(attempt).encode()), ("op.incarnation", incarnation.encode())]
    if op_input:
        hdrs.append(("op.input", op_input.encode()))
    return (p, o, key.encode(), json.dumps({"key": key, "seq": seq, "in_ts": 1}).encode(), 2, hdrs)


def test_a_copy_is_a_duplicate_and_a_reread_is_not():
    c = LiveCounts()
    c.add([row(0, 0, "k1", 1), row(0, 1, "k1", 2), row(0, 0, "k1", 1)])  # offset 0 read twice
    assert (c.duplicates, c.rereads, c.records, c.cursor) == (0, 1, 2, 3)
    c.add([row(1, 7, "k1", 2)])  # (k1, 2) at a second position
    assert c.duplicates == 1 and c.records == 3
    # two input records with the same (key, seq), told apart by op.input, are not copies of one another
    c.add([row(2, 0, "k9", 5, op_input="2:10"), row(2, 1, "k9", 5, op_input="2:11")])
    assert c.duplicates == 1


def test_running_counts_agree_with_the_checkers_live_view_on_the_same_rows():
    rng = random.Random(7)
    rows, offsets = [], {0: 0, 1: 0}
    for i in range(3000):
        p = rng.choice([0, 1])
        batch, attempt = i // 100, rng.choice([0, 0, 0, 1])
        key, seq = f"k{rng.randrange(20)}", rng.randrange(400)
        rows.append(row(p, offsets[p], key, seq, batch=batch, attempt=attempt, sink_partition=p))
        offsets[p] += 1
        if rng.random() < 0.02:  # a reread of the same position
            rows.append(rows[-1])
    log = sink_log([{"event": "abort", "batch": b, "partition": p, "attempt": 1, "error": "fenced"}
                    for b in range(0, 30, 3) for p in (0, 1)])
    c = LiveCounts()
    for i in range(0, len(rows), 250):  # fed as the reader delivers, in chunks
        c.add(rows[i:i + 250])
    want = transactions.live_view(frame(rows), log)
    assert want["counts"]["live-duplicate"] > 0 and want["counts"]["live-aborted-read"] > 0
    assert c.duplicates == want["counts"]["live-duplicate"]
    assert c.aborted_reads(log) == want["counts"]["live-aborted-read"]
    assert (c.records, c.rereads) == (want["records"], want["rereads"])


def test_no_sink_log_means_no_aborted_reads():
    c = LiveCounts()
    c.add([row(0, 0, "k", 1)])
    assert c.aborted_reads(None) == 0 and c.aborted_reads(sink_log([])) == 0


def test_rate_is_over_the_window():
    r = Rate(window_s=5)
    assert r.add(0.0, 0) is None
    assert r.add(1.0, 300) == 300.0
    got = {t: r.add(float(t), 300 * min(t, 7)) for t in range(2, 14)}  # the input stops at t=7
    assert got[7] == 300.0
    assert got[10] == 120.0  # 1,500 at t=5 → 2,100 at t=10
    assert got[13] == 0.0  # no growth over the last 5 s


SNAP = {"up_s": 42.0, "input": {"acked": 1200, "info": 1, "fail": 0, "rate_per_s": 300.0},
        "output": {"seen": 1180, "rate_per_s": 298.5, "rereads": 3}, "lag": {"records": 20, "batch": 17},
        "batch": {"id": 17, "duration_s": 0.84, "age_s": 0.3, "planned": 18},
        "partitions": [{"partition": 0, "lso": 100, "hw": 104, "open": 4, "sampled_s": 0.2}],
        "open_transactions": 1, "driver": {"pid": 123, "restarts": 1}, "executors": [{"id": "0", "pid": 5}],
        "executors_lost": ["1"], "brokers": [{"node": 1, "status": "running"}, {"node": 2, "status": "stopped"}],
        "faults": [{"f": "pause-broker:minority", "age_s": 3.2, "for_s": None}],
        "anomalies": {"live-duplicate": 0, "live-aborted-read": 2}}


def _session(tmp_path, faults=("kill-broker", "pause-broker", "kill-driver")) -> SessionState:
    s = SessionState(tmp_path, "20261127T000000-1")
    me = psutil.Process()  # this process stands in for the supervisor: the view checks it is alive
    s.update(state="up", pid=me.pid, pid_created=me.create_time(), faults_available=list(faults))
    live.write(s.live, {**SNAP, "t": time.time()})
    return s


def test_the_view_draws_every_panel_and_its_keys_send_spool_commands(tmp_path):
    from onceproof.harness.session.view import WatchApp

    s = _session(tmp_path)
    spool = Spool(s.spool_dir)

    async def pending(pilot):
        """The spool's unanswered commands, once the view's worker has written one (≤ 5 s)."""
        for _ in range(50):
            if spool.pending():
                break
            await pilot.pause(0.1)
        return spool.pending()

    async def drive():
        app = WatchApp(s, refresh_s=0.1)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(0.3)
            svg = app.export_screenshot()
            await pilot.press("down", "t")  # pause-broker, for 10 s
            cmds = await pending(pilot)
            spool.answer(cmds[0].name, {"ok": True, "message": "injected pause-broker:minority"})
            await pilot.pause(0.5)
            msg = str(app.query_one("#message").render())
            await pilot.press("a")
            heal = await pending(pilot)
            spool.answer(heal[0].name, {"ok": True, "message": "healed pause-broker:minority"})
            await pilot.press("q")
        return svg, cmds, msg, heal

    svg, cmds, msg, heal = asyncio.run(drive())
    for text in ("300/s", "298.5/s", "live-aborted-read", "pause-broker:minority", "paused", "restarts",
                 "open&#160;transactions:&#160;1", "batch&#160;in&#160;flight"):
        assert text in svg, text
    assert [(c.cmd, c.args) for c in cmds] == [("nemesis", {"f": "pause-broker", "for_s": 10.0})]
    assert "injected pause-broker:minority" in msg
    assert [(c.cmd, c.args) for c in heal] == [("heal", {"f": None})]


def test_a_snapshot_never_hides_its_session_from_the_commands(tmp_path):
    s = _session(tmp_path)
    (s.dir / "20991231T000000-9.live.json").write_text("{}")  # a stray file that sorts after the state
    assert s.live.exists() and find(tmp_path).sid == s.sid


def test_a_stale_snapshot_is_said_so(tmp_path):
    from onceproof.harness.session.view import WatchApp

    s = _session(tmp_path)
    live.write(s.live, {**SNAP, "t": time.time() - 60})

    async def drive():
        app = WatchApp(s, refresh_s=0.1)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(0.2)
            return app.sub_title

    assert "snapshot stale" in asyncio.run(drive())


def test_the_input_end_is_one_past_the_highest_acknowledged_offset():
    from onceproof.workloads.keyed import SendStats

    s = SendStats()
    for p, o in [(0, 5), (0, 3), (1, 0), (0, 9)]:  # delivery reports may come out of order
        s.acked(p, o)
    assert s.ok == 4 and s.ends == {0: 10, 1: 1}
