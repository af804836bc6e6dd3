"""``lose-unsynced-writes``'s seam: the local cluster's :class:`UnsyncedLoss` over a real lazyfs layer, with a
stand-in broker (a Python process writing a segment under the layer: no Kafka, no Java), and the fault's pure
parts (nemesis/lazyfs_fault.py). The layer's own tests are in test_lazyfs.py; the real-cluster run of the fault
is not here (it needs the cluster the wiring brings)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from onceproof.backends.base import BackendError, ClusterShape, UnsyncedLoss
from onceproof.backends.common import lazyfs, processes
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.local.kafka import BrokerProcess, KafkaCluster
from onceproof.nemesis.fault import SKIPPED, NemesisContext
from onceproof.nemesis.lazyfs_fault import LoseUnsyncedWrites, pipeline_loss, recovery_lines

BROKER = textwrap.dedent("""
    import os, sys, time
    d = os.path.join(sys.argv[1], "output-0")
    os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "00000000000000000000.log"), os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b"s" * 1000)
    os.fsync(fd)                      # a roll's flush
    os.write(fd, b"u" * 500)          # appended, acknowledged by the replicas, never fsynced
    open(os.path.join(sys.argv[1], "..", "ready"), "w").close()
    time.sleep(120)
""")

fuse = pytest.mark.skipif(lazyfs.unavailable() is not None, reason=f"no FUSE here: {lazyfs.unavailable()}")


def test_the_protocol_is_derived_from_the_class_and_refuses_without_layers(tmp_path):
    c = KafkaCluster(ClusterSpec(tmp_path, nodes=1))
    assert isinstance(c, UnsyncedLoss)  # the class implements it; a cluster without layers says why not
    assert "not on a lazyfs layer" in c.unsynced_unavailable()
    with pytest.raises(BackendError, match="cannot lose unsynced writes"):
        c.lose_unsynced(1)
    assert ClusterShape(tmp_path).lazyfs is False


@fuse
def test_local_cluster_kills_the_broker_and_drops_its_unsynced_tail(tmp_path):
    c = KafkaCluster(ClusterSpec(tmp_path, nodes=1), lazyfs=True)
    assert c.unsynced_unavailable() is None
    c._start_layer(1)
    mount = tmp_path / "node1" / "data"
    p = None
    try:
        assert lazyfs.mounted(mount)
        p = processes.spawn([sys.executable, "-c", BROKER, str(mount)], log_path=tmp_path / "broker.out")
        deadline = time.monotonic() + 10
        while not (tmp_path / "node1" / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        c.brokers[1] = BrokerProcess(c.spec.node(1), tmp_path / "server.properties", tmp_path / "broker-1.log", p.pid)
        before = c.unsynced(1)
        assert before["unsynced_bytes"] == 500
        ev = c.lose_unsynced(1)
        assert ev["killed"] == {"pid": p.pid, "status_after": "gone"} and c.brokers[1].pid is None
        seg = ev["files"]["/output-0/00000000000000000000.log"]
        assert seg["written"] == 500 and seg["cut_bytes"] == 500 and seg["synced_size"] == 1000
        assert ev["open_handles"] == 0  # the dead broker's handles were released before the crash
        assert (tmp_path / "node1" / "disk" / "output-0" / "00000000000000000000.log").read_bytes() == b"s" * 1000
        assert pipeline_loss(ev["files"], {"input", "output", "__transaction_state"}) == {"output": 500}
    finally:
        if p is not None and p.poll() is None:
            processes.kill_group(p.pid)
        assert c.stop_layers() == []
    assert not lazyfs.mounted(mount) and c._sockets is None


def test_pipeline_loss_counts_segments_of_the_runs_topics_only():
    files = {"/output-3/00000000000000000100.log": {"written": 700},
             "/output-3/00000000000000000100.index": {"written": 16},
             "/__transaction_state-12/00000000000000000000.log": {"written": 90},
             "/__consumer_offsets-7/00000000000000000000.log": {"written": 40},
             "/my-topic-with-dashes-0/00000000000000000000.log": {"written": 5},
             "/input-0/00000000000000000000.log": {"written": 0},
             "/recovery-point-offset-checkpoint": {"written": 30}}
    assert pipeline_loss(files, {"input", "output", "__transaction_state"}) == {"output": 700,
                                                                               "__transaction_state": 90}
    assert pipeline_loss(files, {"my-topic-with-dashes"}) == {"my-topic-with-dashes": 5}


def test_recovery_lines_keep_kafkas_log_recovery():
    text = "\n".join([
        "[2026-11-27 10:00:01,000] INFO Recovering unflushed segment 0. 0/1 recovered for output-3.",
        "[2026-11-27 10:00:01,100] INFO [LogLoader partition=output-3] Loading producer state till offset 120",
        "[2026-11-27 10:00:01,200] WARN Found invalid messages in log segment at byte offset 4096",
        "[2026-11-27 10:00:02,000] INFO [UnifiedLog partition=output-3] Truncating to offset 118",
        "[2026-11-27 10:00:03,000] INFO [KafkaServer id=1] started"])
    lines = recovery_lines(text)
    assert len(lines) == 3 and lines[0].startswith("[2026-11-27 10:00:01,000] INFO Recovering unflushed")


def test_the_fault_is_skipped_on_a_cluster_without_the_protocol(tmp_path):
    class NoDisks:
        nodes = [1, 2, 3]

    ctx = NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path, cluster=NoDisks())
    out = LoseUnsyncedWrites("one").invoke(ctx, __import__("random").Random(1))
    assert out.outcome == SKIPPED and "cannot lose unsynced writes" in out.evidence["reason"]
    c = KafkaCluster(ClusterSpec(tmp_path, nodes=3))  # the protocol, but no layers: skipped with the reason
    out = LoseUnsyncedWrites().invoke(NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path, cluster=c),
                                      __import__("random").Random(1))
    assert out.outcome == SKIPPED and "not on a lazyfs layer" in out.evidence["reason"]
    with pytest.raises(ValueError, match="choose from one, leader, txn-coordinator"):
        LoseUnsyncedWrites("minority")
    assert LoseUnsyncedWrites.sink_needs("txn-coordinator") and not LoseUnsyncedWrites.sink_needs("one")


@fuse
def test_lazyfs_module_runs_as_a_program_and_refuses_a_bad_mount(tmp_path):
    """``python -m onceproof.backends.common.lazyfs`` on a mount point that does not exist exits non-zero
    with libfuse's complaint, leaving nothing mounted."""
    r = subprocess.run([sys.executable, "-m", "onceproof.backends.common.lazyfs", "--backing", str(tmp_path),
                        "--mount", str(tmp_path / "missing" / "mnt"), "--control", str(tmp_path / "c.sock")],
                       capture_output=True, text=True, timeout=30, env=dict(os.environ))
    assert r.returncode != 0 and not lazyfs.mounted(tmp_path / "missing" / "mnt")
