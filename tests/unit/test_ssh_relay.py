"""``backends/ssh/relay.py``'s decision (:func:`plan`) on synthetic listings: which file goes which way, and
what a consumed, claimed, removed or appended file turns into."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from onceproof.backends.ssh.relay import Action, Entry, SyncState, apply_done, parse_listing, plan
from onceproof.pipeline import hooks


def _step(local, remote, state):
    acts = plan(local, remote, state)
    for a in acts:
        apply_done(a, local, remote, state)
    return acts


def test_a_hook_the_harness_arms_goes_to_the_node_and_comes_off_when_the_node_consumes_it():
    s = SyncState()
    armed = f"control/{hooks.ARMED}"
    local = {armed: Entry(0, 1.0)}
    assert _step(local, {}, s) == [Action("push", armed)]
    assert _step(local, {armed: Entry(0, 2.0)}, s) == []  # in step
    # the driver removed it (it opened the window); the harness's copy goes too
    assert _step(local, {}, s) == [Action("delete-local", armed)]
    assert s.pushed == {}


def test_a_hold_claimed_by_a_task_and_a_release_removed_by_the_harness():
    s = SyncState()
    hold, claimed = f"control/{hooks.PRECOMMIT_HOLD}", f"control/{hooks.PRECOMMIT_HOLD}.claimed-3-1"
    local = {hold: Entry(4, 1.0)}
    _step(local, {}, s)
    acts = _step(local, {claimed: Entry(4, 3.0)}, s)
    assert set(acts) == {Action("delete-local", hold), Action("pull", claimed)}
    release = f"control/{hooks.ZOMBIE_RELEASE}"
    _step({release: Entry(0, 5.0)}, {}, s)
    # the harness removed it (heal) while the node still has it: the node's copy goes
    assert _step({}, {release: Entry(0, 5.0)}, s) == [Action("delete-remote", release)]


def test_the_pipelines_files_come_back_and_follow_the_nodes_changes_and_the_harness_removals():
    s = SyncState()
    ready, opened = f"control/{hooks.READY}", f"control/{hooks.OPEN}"
    assert _step({}, {ready: Entry(10, 1.0)}, s) == [Action("pull", ready)]
    assert _step({ready: Entry(10, 1.0)}, {ready: Entry(10, 1.0)}, s) == []
    assert _step({ready: Entry(10, 1.0)}, {ready: Entry(12, 2.0)}, s) == [Action("pull", ready)]
    assert _step({ready: Entry(12, 2.0)}, {}, s) == [Action("delete-local", ready)]
    _step({}, {opened: Entry(30, 4.0)}, s)
    # the nemesis handled the open window and removed its copy: the node's goes too
    assert _step({}, {opened: Entry(30, 4.0)}, s) == [Action("delete-remote", opened)]
    # checkpoint logs come back as they appear
    assert _step({}, {"checkpoint/offsets/0": Entry(300, 5.0), "checkpoint/commits/0": Entry(20, 6.0)}, s) == \
        [Action("pull", "checkpoint/commits/0"), Action("pull", "checkpoint/offsets/0")]


def test_append_only_logs_come_back_by_offset():
    s = SyncState()
    assert plan({}, {"sink.jsonl": Entry(100, 1.0)}, s) == [Action("append", "sink.jsonl", 0)]
    apply_done(Action("append", "sink.jsonl", 0), {}, {"sink.jsonl": Entry(100, 1.0)}, s, appended_to=90)
    assert plan({}, {"sink.jsonl": Entry(100, 1.0)}, s) == [Action("append", "sink.jsonl", 90)]
    apply_done(Action("append", "sink.jsonl", 90), {}, {}, s, appended_to=100)
    assert plan({}, {"sink.jsonl": Entry(100, 1.0)}, s) == []
    assert plan({}, {"logs/driver-1.log": Entry(5, 1.0)}, SyncState()) == [Action("append", "logs/driver-1.log", 0)]


def test_listing_lines():
    assert parse_listing("control/driver.ready\t12\t1800000000.5\nbad line\nsink.jsonl\tx\t1\n") == \
        {"control/driver.ready": Entry(12, 1800000000.5)}


def test_the_driver_node_runs_the_pipeline_on_its_run_directory_and_the_standalone_master():
    from onceproof.backends.base import PipelineArgs
    from onceproof.backends.ssh.app import remote_pipeline
    local = Path("/home/u/results/run-1")
    p = PipelineArgs(bootstrap="10.0.0.1:9092", sink="eos", checkpoint=local / "checkpoint", control=local / "control",
                     sink_log=local / "sink.jsonl", input_topic="input", output_topic="output",
                     progress_topic="output-progress", sink_id="s", trigger_ms=500, max_offsets=1000,
                     txn_timeout_ms=30000, pool_size=16, master="local-cluster[2,1,1024]")
    remote = remote_pipeline(p, PurePosixPath("/var/lib/onceproof/runs/abc"), "spark://10.0.0.4:7077")
    argv = remote.argv()
    assert argv[argv.index("--checkpoint") + 1] == "/var/lib/onceproof/runs/abc/checkpoint"
    assert argv[argv.index("--control-dir") + 1] == "/var/lib/onceproof/runs/abc/control"
    assert argv[argv.index("--sink-log") + 1] == "/var/lib/onceproof/runs/abc/sink.jsonl"
    assert argv[argv.index("--master") + 1] == "spark://10.0.0.4:7077"
    assert argv[argv.index("--bootstrap") + 1] == "10.0.0.1:9092"
    named = remote_pipeline(p.__class__(**{**p.__dict__, "master": "local[2]"}), PurePosixPath("/r"), "spark://m:7077")
    assert named.master == "local[2]"
