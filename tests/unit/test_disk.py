"""Disk faults (issue 29 item 3) in pure logic: Kafka's segment format as ``nemesis/log_segment.py`` reads it
(synthetic v2 record batches built here byte by byte, with their CRC-32C), the seeded choice of the tail to
garble and the garbling, the broker log lines the evidence is read from (sample lines in the format Kafka
4.1.1 writes them: the message texts are those of its ``LogSegment``, ``LogLoader``, ``LogManager``,
``ReplicaManager`` and ``LogDirFailureChannel`` classes, in this harness's log4j layout ``[%d] %p %m (%c)``),
the tmpfs the local backend fills (a real mount, skipped without the privilege), the ``--cluster-config``
option, and both faults' flow against the stand-in backend (``tests/stand_in_backend.py``). Nothing here
starts a JVM or Kafka: whether a real broker recovers as the lines say is ``tests/cluster/test_disk_faults.py``'s."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from onceproof.backends.base import GONE, BackendError
from onceproof.backends.common import tmpfs
from onceproof.backends.common.logdir import LocalDir
from onceproof.clients import durability
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.nemesis import broker, catalog, disk, log_segment, operator, packages
from onceproof.nemesis.disk import CorruptSegmentTail, DiskFull, disk_failure, judge_disk_full, recovery
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext
from tests.stand_in_backend import DiskStandInCluster, StandInCluster

# ------------------------------------------------------------------------------------------ a v2 segment


def _crc32c_table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_T = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of a v2 record batch (Kafka's ``Crc32C``)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def varint(n: int) -> bytes:
    """Kafka's zigzag varint (``ByteUtils.writeVarint``/``writeVarlong``)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record(offset_delta: int, key: bytes, value: bytes) -> bytes:
    body = b"\0" + varint(0) + varint(offset_delta) + varint(len(key)) + key + varint(len(value)) + value + varint(0)
    return varint(len(body)) + body


def batch(base: int, n: int = 3, *, pid: int = 7, txn: bool = True, marker: str | None = None) -> bytes:
    """One v2 batch at offset ``base``: ``n`` data records, or (``marker``) one commit/abort control record."""
    if marker:
        recs = [record(0, struct.pack(">hh", 0, {"abort": 0, "commit": 1}[marker]), struct.pack(">hi", 0, 0))]
        attrs = 0x30
    else:
        recs = [record(i, f"k{i}".encode(), f"value-{base + i}".encode() * 3) for i in range(n)]
        attrs = 0x10 if txn else 0
    after_crc = struct.pack(">hiqqqhii", attrs, len(recs) - 1, 1000, 1000, pid, 0, 0, len(recs)) + b"".join(recs)
    tail = struct.pack(">ib", 0, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc  # leader epoch, magic, crc
    return struct.pack(">qi", base, len(tail)) + tail


def crc_ok(data: bytes, b: log_segment.Batch) -> bool:
    """What Kafka's ``DefaultRecordBatch.ensureValid`` checks: the stored CRC over ``attributes`` .. end."""
    stored = struct.unpack_from(">I", data, b.start + 17)[0]
    return stored == crc32c(data[b.start + 21:b.start + b.size])


def eos_segment(transactions: int = 6) -> bytes:
    """Two producers' transactions interleaved as the eos sink's tasks write an output partition: each a data
    batch, then its commit marker (the last one aborted)."""
    out, off = b"", 0
    for t in range(transactions):
        pid = 100 + t % 2
        out += batch(off, 3, pid=pid)
        off += 3
        out += batch(off, pid=pid, marker="abort" if t == transactions - 1 else "commit")
        off += 1
    return out


# ------------------------------------------------------------------------------------------ the format


def test_the_batches_of_a_segment_are_read_with_their_offsets_and_markers():
    data = eos_segment(3)
    found, trailing = log_segment.batches(data)
    assert trailing == 0 and len(found) == 6
    assert [(b.base_offset, b.last_offset) for b in found] == [(0, 2), (3, 3), (4, 6), (7, 7), (8, 10), (11, 11)]
    assert [b.marker for b in found] == [None, "commit", None, "commit", None, "abort"]
    assert [b.control for b in found] == [False, True] * 3 and all(b.transactional for b in found)
    assert [b.producer_id for b in found] == [100, 100, 101, 101, 100, 100]
    assert sum(b.size for b in found) == len(data) and all(crc_ok(data, b) for b in found)


def test_a_torn_last_batch_is_left_out_and_counted():
    data = eos_segment(2)
    torn = data + batch(100)[:40]
    found, trailing = log_segment.batches(torn)
    assert len(found) == 4 and trailing == 40
    assert log_segment.batches(b"")[0] == [] and log_segment.batches(b"\0" * 11) == ([], 11)


def test_the_active_segment_and_the_hosted_partitions_come_from_kafkas_file_names(tmp_path):
    for d in ("output-0", "output-3", "output-12", "output-progress-0", "output-4.abc-delete", "input-1"):
        (tmp_path / d).mkdir()
    (tmp_path / "meta.properties").write_text("")
    d = LocalDir(tmp_path)
    assert log_segment.hosted_partitions(d.listdir(), "output") == [0, 3, 12]
    assert log_segment.hosted_partitions(d.listdir(), "output-progress") == [0]
    assert log_segment.hosted_partitions(LocalDir(tmp_path / "missing").listdir(), "output") == []
    p = tmp_path / "output-3"
    for base in (0, 1234, 99):
        (p / f"{base:020d}.log").write_bytes(b"")
        (p / f"{base:020d}.index").write_bytes(b"")
    (p / "00000000000000009999.log.deleted").write_bytes(b"")
    assert log_segment.active_segment(d.listdir("output-3")) == "00000000000000001234.log"
    assert log_segment.active_segment(d.listdir("output-0")) is None
    assert log_segment.segment_base(Path("00000000000000000042.log")) == 42


# ------------------------------------------------------------------------------------------ the plan


@pytest.mark.parametrize("seed", range(12))
def test_the_garbling_starts_inside_a_tail_batchs_records_and_runs_to_the_end(seed):
    data = eos_segment(8)
    found, _ = log_segment.batches(data)
    g = log_segment.plan(found, len(data), random.Random(seed))
    b = found[g.batch_index]
    assert g.batch_index >= len(found) - log_segment.TAIL_BATCHES
    assert b.start + log_segment.HEADER <= g.start < b.start + b.size and g.end == len(data)
    assert not b.control and g.at_txn_boundary  # a data batch opening its producer's transaction
    assert g.offsets_garbled == [b.base_offset, found[-1].last_offset] and g.base_offset == b.base_offset
    gone = found[g.batch_index:]
    assert g.markers_garbled == {"commit": sum(x.marker == "commit" for x in gone),
                                 "abort": sum(x.marker == "abort" for x in gone)}
    assert g.data_batches_garbled == sum(not x.control for x in gone)
    assert g.evidence()["bytes_garbled"] == len(data) - g.start


def test_the_plan_is_the_seeds():
    data = eos_segment(8)
    found, _ = log_segment.batches(data)
    plans = {s: log_segment.plan(found, len(data), random.Random(s)) for s in range(20)}
    assert all(plans[s] == log_segment.plan(found, len(data), random.Random(s)) for s in plans)
    assert len({(p.batch_index, p.start) for p in plans.values()}) > 3  # the seed moves it


def test_a_segment_of_markers_only_or_of_nothing():
    only = batch(0, marker="commit") + batch(1, marker="commit")
    found, _ = log_segment.batches(only)
    g = log_segment.plan(found, len(only), random.Random(1))
    assert g.batch_index == 1 and g.markers_garbled == {"commit": 1, "abort": 0}
    assert log_segment.plan([], 0, random.Random(1)) is None


def test_non_transactional_batches_are_each_a_boundary():
    data = b"".join(batch(i * 3, txn=False) for i in range(4))
    found, _ = log_segment.batches(data)
    g = log_segment.plan(found, len(data), random.Random(3))
    assert g.at_txn_boundary and g.markers_garbled == {"commit": 0, "abort": 0}


def test_garbling_changes_every_byte_and_breaks_exactly_the_chosen_batchs_crc(tmp_path):
    """Kafka's recovery validates batch after batch (``ensureValid``): the first whose CRC fails is where it
    truncates. Every batch before the chosen one keeps its CRC, the chosen one's header (its length) is intact
    and its CRC fails; the file keeps its size."""
    data = eos_segment(8)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(data)
    found, _ = log_segment.batches(data)
    g = log_segment.plan(found, len(data), random.Random(7))
    log_segment.apply(LocalDir(tmp_path), seg.name, g, random.Random(99))
    after = seg.read_bytes()
    assert len(after) == len(data) and after[:g.start] == data[:g.start]
    assert all(a != b for a, b in zip(after[g.start:], data[g.start:]))
    assert all(crc_ok(after, b) for b in found[:g.batch_index])
    chosen = found[g.batch_index]
    assert after[chosen.start:chosen.start + 17] == data[chosen.start:chosen.start + 17]
    assert not crc_ok(after, chosen)
    assert log_segment.garbled(data, g, random.Random(99)) == after[g.start:]  # the seed's bytes


def test_a_segment_that_changed_since_the_plan_is_not_written(tmp_path):
    data = eos_segment(2)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(data)
    found, _ = log_segment.batches(data)
    g = log_segment.plan(found, len(data), random.Random(1))
    seg.write_bytes(data + b"x")
    with pytest.raises(ValueError, match="not the"):
        log_segment.apply(LocalDir(tmp_path), seg.name, g, random.Random(1))
    assert seg.read_bytes() == data + b"x"


# ------------------------------------------------------------------------------------------ the broker's log

D = "/r/cluster/node2/data"
LOADER = "(org.apache.kafka.storage.internals.log.LogLoader)"
SEGMENT = "(org.apache.kafka.storage.internals.log.LogSegment)"
T = "[2026-11-30 10:00:01,140]"
RECOVERY_LOG = "\n".join([
    f"{T} INFO [LogLoader partition=output-3, dir={D}] Recovering unflushed segment 0. 0/1 recovered for "
    f"output-3. {LOADER}",
    f"{T} WARN Found invalid messages in log segment {D}/output-3/00000000000000000000.log at byte offset "
    f"5120. {SEGMENT}",
    "org.apache.kafka.common.errors.CorruptRecordException: Record is corrupt (stored crc = 1905412345, "
    "computed crc = 2143456789)",
    f"{T} WARN [LogLoader partition=output-3, dir={D}] Corruption found in segment 0, truncating to offset 812 "
    f"{LOADER}",
    f"{T} WARN [LogLoader partition=output-30, dir={D}] Corruption found in segment 0, truncating to offset 5 "
    f"{LOADER}",
    f"{T} INFO Completed load of Log(dir={D}/output-3, topicId=AbCdEfGhIjKlMnOpQrStUv, topic=output, "
    "partition=3, highWatermark=812, lastStableOffset=812, logStartOffset=0, logEndOffset=812) with 1 segments, "
    f"local-log-start-offset 0 and log-end-offset 812 in 52ms (7/64 completed in {D}) (kafka.log.LogManager)",
    f"{T} INFO Completed load of Log(dir={D}/output-progress-0, topicId=x, topic=output-progress, partition=0, "
    "highWatermark=9, lastStableOffset=9, logStartOffset=0, logEndOffset=9) with 1 segments, "
    f"local-log-start-offset 0 and log-end-offset 9 in 3ms (8/64 completed in {D}) (kafka.log.LogManager)",
]) + "\n"


def test_recovery_lines_of_the_garbled_partition_are_read_and_no_others():
    r = recovery(RECOVERY_LOG, "output-3", f"{D}/output-3/00000000000000000000.log")
    assert r["found"] and r["invalid_at_byte"] == 5120 and (r["segment_base"], r["truncated_to_offset"]) == (0, 812)
    assert r["log_end_offset"] == 812 and len(r["lines"]) == 2
    # a Docker broker logs its container's path: the partition directory and the file name still match
    docker = RECOVERY_LOG.replace(D, "/var/lib/kafka/data")
    assert recovery(docker, "output-3", "output-3/00000000000000000000.log")["found"]
    other = recovery(RECOVERY_LOG, "output-30")
    assert other["truncated_to_offset"] == 5 and other["invalid_at_byte"] is None
    assert not recovery(RECOVERY_LOG, "output-0")["found"]
    assert not recovery(RECOVERY_LOG.splitlines()[0] + "\n" + RECOVERY_LOG.splitlines()[-2], "output-3")["found"]


DISK_FULL_LOG = "\n".join([
    f"{T} ERROR Error while appending records to output-2 in dir {D} "
    "(org.apache.kafka.storage.internals.log.LogDirFailureChannel)",
    "java.io.IOException: No space left on device",
    "\tat java.base/sun.nio.ch.FileDispatcherImpl.write0(Native Method)",
    f"{T} WARN [ReplicaManager broker=2] Stopping serving replicas in dir {D} with uuid AAAAAAAAAAAAAAAAAAAAAA "
    "because the log directory has failed. (kafka.server.ReplicaManager)",
    f"{T} WARN [LogManager broker=2] Stopping serving logs in dir {D} (kafka.log.LogManager)",
    f"{T} ERROR [ReplicaManager broker=2] Shutdown broker because the metadata log dir {D} has failed "
    "(kafka.server.ReplicaManager)",
]) + "\n"


def test_the_disk_failure_is_read_from_kafkas_lines():
    f = disk_failure(DISK_FULL_LOG)
    assert f["no_space"] == 1 and f["dir_failed"] and f["shutdown"] and len(f["lines"]) == 5
    assert judge_disk_full(f, gone=True)
    only_dir = disk_failure(DISK_FULL_LOG.splitlines()[0])
    assert only_dir == {"no_space": 0, "dir_failed": True, "shutdown": False, "lines": only_dir["lines"]}
    assert not judge_disk_full(only_dir, gone=True)  # no ENOSPC: another disk error, not this fault's
    enospc = disk_failure("\n".join(DISK_FULL_LOG.splitlines()[1:2]))
    assert not judge_disk_full(enospc, gone=False) and judge_disk_full(enospc, gone=True)
    assert disk_failure(RECOVERY_LOG)["no_space"] == 0 and not disk_failure("")["lines"]
    assert disk_failure(f"x Shutdown broker because all log dirs in {D} have failed (kafka.log.LogManager)")["shutdown"]


# ------------------------------------------------------------------------------------------ tmpfs


def test_a_fill_refuses_anything_but_a_mount_of_ours(tmp_path):
    with pytest.raises(BackendError, match="refusing to fill"):
        tmpfs.fill(tmp_path)
    assert not (tmp_path / tmpfs.FILL_NAME).exists() and tmpfs.unfill(tmp_path) == 0
    mounts = f"tmpfs /dev/shm tmpfs rw 0 0\n{tmpfs.SOURCE} {tmp_path} tmpfs rw,size=1024k 0 0\n"
    assert tmpfs.is_ours(tmp_path, mounts) and not tmpfs.is_ours(tmp_path / "x", mounts)
    assert not tmpfs.is_ours(Path("/dev/shm"), mounts)
    spaced = tmp_path / "a b"
    assert tmpfs.is_ours(spaced, f"{tmpfs.SOURCE} {str(spaced).replace(' ', chr(92) + '040')} tmpfs rw 0 0\n")


def test_the_disk_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("ONCEPROOF_DISK_MB", raising=False)
    assert tmpfs.size_mb() == tmpfs.DEFAULT_MB
    monkeypatch.setenv("ONCEPROOF_DISK_MB", "64")
    assert tmpfs.size_mb() == 64
    for bad in ("8", "lots", "-5"):
        monkeypatch.setenv("ONCEPROOF_DISK_MB", bad)
        with pytest.raises(ValueError, match="ONCEPROOF_DISK_MB"):
            tmpfs.size_mb()


@pytest.mark.skipif(tmpfs.unavailable() is not None, reason=f"cannot mount a tmpfs here: {tmpfs.unavailable()}")
def test_a_filled_tmpfs_refuses_the_next_write_until_emptied(tmp_path, monkeypatch):
    """A real 4 MiB tmpfs (no Kafka): filled, the next write fails with ENOSPC; emptied, it succeeds; noted
    in the run directory, the reaper's sweep unmounts it."""
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("ONCEPROOF_RUN", str(run))
    d = tmp_path / "data"
    d.mkdir()
    tmpfs.note(d)
    tmpfs.mount(d, 4)
    try:
        assert tmpfs.is_ours(d)
        (d / "meta.properties").write_text("kept")
        got = tmpfs.fill(d)
        assert got["size_bytes"] == 4 << 20 and got["free_after"] == 0 and got["filled_bytes"] >= got["free_before"] > 0
        with pytest.raises(OSError) as e, open(d / "next.log", "wb") as f:
            f.write(b"x" * 8192)
            f.flush()
            os.fsync(f.fileno())
        assert e.value.errno == 28  # ENOSPC
        assert tmpfs.unfill(d) == got["filled_bytes"] and tmpfs.free_bytes(d) > 0
        (d / "next.log").write_bytes(b"x" * 8192)
        assert (d / "meta.properties").read_text() == "kept"
    finally:
        assert tmpfs.unmount_noted(str(run)) == [str(d)]
    assert not tmpfs.is_ours(d) and tmpfs.unmount(d) is False


def test_a_cluster_with_small_disks_but_no_mount_says_why(tmp_path):
    from onceproof.backends.common.layout import ClusterSpec
    from onceproof.backends.local.kafka import KafkaCluster

    plain = KafkaCluster(ClusterSpec(tmp_path))
    assert "planned no disk-full" in plain.disk_unavailable() and plain.unfill_disk(1) == 0
    small = KafkaCluster(ClusterSpec(tmp_path), small_disks=True)
    assert "have no size-limited disk" in small.disk_unavailable()  # nothing was mounted (never formatted)
    with pytest.raises(BackendError, match="cannot fill broker 1"):
        small.fill_disk(1)
    assert small.log_dir_of(2).path == tmp_path / "node2" / "data" and small.unmount_disks() == []


# ------------------------------------------------------------------------------------------ registration


def test_the_disk_faults_run_when_named_or_in_their_package_never_in_all():
    assert catalog.expand("corrupt-segment-tail") == ["corrupt-segment-tail:leader", "corrupt-segment-tail:one"]
    assert catalog.expand("disk-full") == ["disk-full:leader", "disk-full:one"]
    assert not any(s.partition(":")[0] in catalog.DISK for s in catalog.all_specs())
    assert packages.specs("disk") == ["corrupt-segment-tail:leader", "corrupt-segment-tail:one", "disk-full:leader",
                                      "disk-full:one", "lose-unsynced-writes:one", "lose-unsynced-writes:leader"]
    assert catalog.needs_lazyfs(["lose-unsynced-writes:one"]) and not catalog.needs_lazyfs(catalog.all_specs())
    assert catalog.needs_small_disks(["kill-driver", "disk-full:one"])
    assert not catalog.needs_small_disks(["corrupt-segment-tail"])
    assert not catalog.needs_small_disks(catalog.all_specs())
    with pytest.raises(ValueError, match="leader, one"):
        catalog.parse("disk-full:minority")
    assert catalog.sink_needs("corrupt-segment-tail") == frozenset() == catalog.sink_needs("disk-full")


def test_the_cluster_config_is_an_option_that_names_the_run_and_replays():
    assert durability.names() == ["default", "weak-durability", "single-replica"]
    assert durability.get("weak-durability").configs == {"min.insync.replicas": "1",
                                                         "unclean.leader.election.enable": "true"}
    assert [durability.get(n).replication_for(3) for n in durability.names()] == [3, 3, 1]
    assert durability.get("default").replication_for(1) == 1 and durability.get("default").configs == {}
    assert durability.get("single-replica").configs["min.insync.replicas"] == "1"  # else acks=all is refused
    with pytest.raises(ValueError, match="weak-durability"):
        durability.get("weakest")
    cfg = TestConfig(nemesis=["corrupt-segment-tail:leader"], cluster_config="single-replica", time_limit=60).validate()
    assert cfg.name == "eos-corrupt-segment-tail-leader-single-replica"
    assert "--cluster-config single-replica" in cfg.replay_command()
    assert "--cluster-config" not in TestConfig().replay_command() and TestConfig().name == "eos-no-faults"
    with pytest.raises(ConfigError) as e:
        TestConfig(cluster_config="rf0").validate()
    assert e.value.option == "--cluster-config" and "single-replica" in e.value.message


def test_the_docker_backend_garbles_segments_but_fills_no_disk():
    with pytest.raises(ConfigError) as e:
        TestConfig(backend="docker", nemesis=["disk-full:one"], time_limit=90).validate()
    assert e.value.option == "--nemesis" and "cannot perform disk-full:one" in e.value.message
    TestConfig(backend="docker", nemesis=["corrupt-segment-tail"], time_limit=90).validate()


# ------------------------------------------------------------------------------------------ the faults' flow


def _ctx(tmp_path, cluster, hold_s=0.01) -> NemesisContext:
    return NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path, cluster=cluster, hold_s=hold_s)


@pytest.fixture
def in_sync(monkeypatch):
    """Kafka's metadata stood in for: a node is registered, and in every ISR, while its process is alive."""
    def use(cluster: StandInCluster):
        monkeypatch.setattr(broker, "_registered", lambda bootstrap, node: cluster.state(node).alive)
        monkeypatch.setattr(operator, "_out_of_sync", lambda bootstrap, node: [] if cluster.state(node).alive else None)
    return use


class RecoveringCluster(DiskStandInCluster):
    """On start, a node's log gets the lines a real broker writes when it recovers the segment the test
    garbled (``RECOVERY_LOG``'s format), with the byte offset and offset the segment's batches give."""

    __slots__ = ()

    def start(self, node: int) -> None:
        super().start(node)
        data = self.data_path(node)
        for seg in data.glob("output-*/*.log"):
            raw = seg.read_bytes()
            found, _ = log_segment.batches(raw)
            bad = next((b for b in found if not crc_ok(raw, b)), None)
            if bad is not None:
                p = seg.parent.name
                with open(self.logs[node], "a") as f:
                    f.write(f"[2026-11-30 10:00:01,140] WARN Found invalid messages in log segment {seg} at byte "
                            f"offset {bad.start}. (org.apache.kafka.storage.internals.log.LogSegment)\n"
                            f"[2026-11-30 10:00:01,141] WARN [LogLoader partition={p}, dir={data}] Corruption found "
                            f"in segment 0, truncating to offset {bad.base_offset} "
                            "(org.apache.kafka.storage.internals.log.LogLoader)\n")
                seg.write_bytes(raw[:bad.start])


def _cluster_with_segments(tmp_path, cls=RecoveringCluster):
    c = cls(3, tmp_path)
    for n in c.nodes:
        for p in range(6):
            d = c.data_path(n) / f"output-{p}"
            d.mkdir(parents=True)
            (d / "00000000000000000000.log").write_bytes(eos_segment(4 + p))
        (c.data_path(n) / "output-progress-0").mkdir()
        c.logs[n] = tmp_path / f"broker-{n}.log"
        c.logs[n].write_text("[2026-11-30 09:59:00,000] INFO started (kafka.Kafka)\n")
    return c


def test_corrupt_segment_tail_kills_garbles_restarts_and_reads_the_recovery(tmp_path, in_sync):
    c = _cluster_with_segments(tmp_path)
    in_sync(c)
    before = {n: c.state(n).pid for n in c.nodes}
    out = CorruptSegmentTail("one").invoke(_ctx(tmp_path, c), random.Random(4))
    assert out.outcome == EFFECTIVE and out.was_exercised, out.evidence
    ev, n = out.evidence, out.evidence["node"]
    assert ev["killed"] == {"pid": before[n], "status_after": GONE} and ev["waited_for_output_s"] == 0
    assert [x for x in c.calls if x[0] in ("kill", "start")] == [("kill", n), ("start", n)]
    g = ev["garble"]
    assert g["segment"] == f"output-{g['partition']}/00000000000000000000.log"
    assert g["size_after"] == g["batch_start"] < g["start"] < g["size_before"]
    assert ev["recovery"]["found"] and ev["recovery"]["as_planned"]
    assert ev["recovery"]["truncated_to_offset"] == g["base_offset"] and ev["in_sync_after_s"] is not None
    again = _cluster_with_segments(tmp_path / "again")
    in_sync(again)
    assert CorruptSegmentTail("one").invoke(_ctx(tmp_path, again), random.Random(4)).evidence["garble"] == {
        **g, "segment_path": g["segment_path"].replace(str(tmp_path), str(tmp_path / "again"))}  # the seed's


def test_corrupt_segment_tail_leader_garbles_the_partition_it_leads(tmp_path, in_sync, monkeypatch):
    c = _cluster_with_segments(tmp_path)
    in_sync(c)
    monkeypatch.setattr(broker.targets, "partition_leaders", lambda bootstrap, topic: {p: 1 + p % 3 for p in range(6)})
    out = CorruptSegmentTail("leader").invoke(_ctx(tmp_path, c), random.Random(2))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and ev["node"] == 1 + ev["partition"] % 3
    assert ev["garble"]["partition"] == ev["partition"]


def test_without_a_recovery_line_the_turn_is_not_effective(tmp_path, in_sync):
    c = _cluster_with_segments(tmp_path, DiskStandInCluster)  # nothing writes the broker's recovery lines
    in_sync(c)
    out = CorruptSegmentTail("one").invoke(_ctx(tmp_path, c), random.Random(1))
    assert out.outcome == NOT_EFFECTIVE and not out.evidence["recovery"]["found"] and "garble" in out.evidence
    assert c.state(out.evidence["node"]).alive  # restarted all the same


def test_nothing_to_garble_restarts_the_broker_and_says_so(tmp_path, in_sync, monkeypatch):
    c = DiskStandInCluster(3, tmp_path)
    in_sync(c)
    for n in c.nodes:
        (c.data_path(n) / "output-0").mkdir(parents=True)
    monkeypatch.setattr(disk, "OUTPUT_WAIT_S", 1.5)
    out = CorruptSegmentTail("one").invoke(_ctx(tmp_path, c), random.Random(1))
    assert out.outcome == NOT_EFFECTIVE and "no batch" in out.evidence["garble"]["reason"]
    assert out.evidence["waited_for_output_s"] is None  # it waited for output data, in vain
    assert all(c.state(n).alive for n in c.nodes)


def test_a_cluster_without_log_dirs_or_disks_skips_the_turn(tmp_path):
    c = StandInCluster(3)
    for fault in (CorruptSegmentTail("one"), DiskFull("one")):
        out = fault.invoke(_ctx(tmp_path, c), random.Random(1))
        assert out.outcome == SKIPPED and "this backend's cluster" in out.evidence["reason"]
    d = DiskStandInCluster(3, tmp_path)
    d.no_disk = "mount -t tmpfs failed (needs root or CAP_SYS_ADMIN)"
    out = DiskFull("leader").invoke(_ctx(tmp_path, d), random.Random(1))
    assert out.outcome == SKIPPED and "CAP_SYS_ADMIN" in out.evidence["reason"] and d.calls == []


def test_disk_full_fills_waits_for_the_failure_empties_and_restarts(tmp_path, in_sync, monkeypatch):
    c = DiskStandInCluster(3, tmp_path)
    in_sync(c)
    for n in c.nodes:
        c.logs[n] = tmp_path / f"broker-{n}.log"
        c.logs[n].write_text("")
    real_fill = c.fill_disk

    def fill_and_fail(node):  # the broker's own lines, as Kafka 4.1.1 writes them when its only log dir fills
        got = real_fill(node)
        c.logs[node].write_text(DISK_FULL_LOG)
        return got

    monkeypatch.setattr(type(c), "fill_disk", lambda self, node: fill_and_fail(node))
    out = DiskFull("one").invoke(_ctx(tmp_path, c), random.Random(3))
    ev, n = out.evidence, out.evidence["node"]
    assert out.outcome == EFFECTIVE and out.was_exercised, ev
    assert ev["gone"] and ev["failed_after_s"] is not None and ev["freed_bytes"] == 1 << 20
    assert ev["failure"]["shutdown"] and ev["failure"]["no_space"] == 1
    assert [x for x in c.calls if x[0] != "clock"] == [("fill", n), ("unfill", n), ("start", n)]
    assert c.fills == {} and c.state(n).alive


def test_a_broker_that_survives_its_full_disk_is_not_effective_and_not_restarted(tmp_path, in_sync, monkeypatch):
    c = DiskStandInCluster(3, tmp_path)
    c.halts = False
    in_sync(c)
    monkeypatch.setattr(disk, "FAIL_WAIT_S", 0.2)
    out = DiskFull("one").invoke(_ctx(tmp_path, c), random.Random(3))
    assert out.outcome == NOT_EFFECTIVE and out.evidence["still_running"] and not out.evidence["gone"]
    assert not [x for x in c.calls if x[0] == "start"] and c.fills == {}


def test_heal_empties_every_disk_and_restarts_only_outside_teardown(tmp_path):
    c = DiskStandInCluster(3, tmp_path)
    c.fill_disk(2)
    ctx = _ctx(tmp_path, c)
    ctx.teardown.set()
    DiskFull().heal(ctx)
    assert c.fills == {} and not c.state(2).alive
    ctx.teardown.clear()
    DiskFull().heal(ctx)
    CorruptSegmentTail().heal(ctx)
    assert c.state(2).alive and [x for x in c.calls if x[0] == "start"] == [("start", 2)]
    DiskFull().heal(_ctx(tmp_path, StandInCluster()))  # no disks: nothing to empty, no error
