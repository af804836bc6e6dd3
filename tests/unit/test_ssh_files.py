"""The ssh backend's file access on a node, run against this host through :class:`HostRemote`, a
:class:`onceproof.backends.ssh.remote.Remote` that runs each argv here with ``subprocess`` (the commands and
their quoting are the ones a node runs; only the transport is left out, the ssh cluster tests have it):
a growing log read from a byte position (``RemoteLog``), a log directory listed, read and written in place
(``RemoteDir``, what ``corrupt-segment-tail`` garbles), libfaketime's offset file and library lookup
(``ssh/clock.py``), and the nemeses' view of a broker's log (``nemesis/broker_log.py``)."""

from __future__ import annotations

import random
import shlex
import subprocess
import time
from pathlib import PurePosixPath

from onceproof.backends.common import faketime
from onceproof.backends.common.logdir import LocalDir
from onceproof.backends.ssh import clock
from onceproof.backends.ssh.remote import Completed
from onceproof.backends.ssh.remote_dir import RemoteDir
from onceproof.backends.ssh.remote_log import RemoteLog
from onceproof.nemesis import broker_log, disk, log_segment
from tests.stand_in_backend import ClockStandInCluster


class HostRemote:
    """Runs argv on this host (a shell re-parses ``shlex.join`` of it, as sshd's would)."""

    name = "here"

    def __init__(self):
        self.commands: list[list[str]] = []

    def run(self, argv, *, timeout_s=60.0, stdin=None, root=False) -> Completed:
        self.commands.append(list(argv))
        t = time.monotonic()
        p = subprocess.run(["sh", "-c", shlex.join(argv)], input=stdin, capture_output=True, text=True,
                           timeout=timeout_s)
        return Completed(self.name, tuple(argv), p.returncode, p.stdout, p.stderr, time.monotonic() - t)

    def put(self, local, remote, *, mode=None, timeout_s=300.0):
        raise AssertionError("not used")

    def get(self, remote, local, *, timeout_s=300.0):
        raise AssertionError("not used")


def test_a_remote_log_is_read_from_a_byte_position_as_it_grows(tmp_path):
    f = tmp_path / "broker-1.log"
    log = RemoteLog(HostRemote(), PurePosixPath(f))
    assert log.size() == 0 and log.read_from(0) == b""  # not written yet
    f.write_text("[2026-11-28 00:00:00,000] INFO one\n")
    start = log.size()
    assert start == len(f.read_bytes())
    with open(f, "a") as out:
        out.write("[2026-11-28 00:00:01,000] INFO two – ü\n")
    assert log.read_from(start) == "[2026-11-28 00:00:01,000] INFO two – ü\n".encode()
    assert log.read_from(log.size()) == b""


def test_a_remote_log_dir_lists_reads_and_writes_in_place_like_the_local_one(tmp_path):
    for d in ("output-0", "output-3", "input-1"):
        (tmp_path / d).mkdir()
    seg = tmp_path / "output-3" / "00000000000000000000.log"
    seg.write_bytes(bytes(range(256)) * 4)
    here, there = LocalDir(tmp_path), RemoteDir(HostRemote(), PurePosixPath(tmp_path))
    assert there.listdir() == here.listdir() == ["input-1", "output-0", "output-3"]
    assert there.listdir("missing") == [] and there.size("missing") is None
    assert there.read("output-3/00000000000000000000.log") == seg.read_bytes()
    there.write_at("output-3/00000000000000000000.log", 10, b"\x00\xff\n\r")
    assert seg.read_bytes()[8:16] == bytes([8, 9, 0, 255, 10, 13, 14, 15]) and there.size(
        "output-3/00000000000000000000.log") == 1024
    assert there.where("output-3") == f"here:{tmp_path}/output-3"


def test_garbling_through_the_remote_dir_writes_the_same_bytes_as_through_the_local_one(tmp_path):
    from tests.unit.test_disk import eos_segment
    for name in ("a", "b"):
        d = tmp_path / name / "output-2"
        d.mkdir(parents=True)
        (d / "00000000000000000000.log").write_bytes(eos_segment(6))
    got_a = disk.garble_partition(LocalDir(tmp_path / "a"), "output", 2, random.Random(5))
    got_b = disk.garble_partition(RemoteDir(HostRemote(), PurePosixPath(tmp_path / "b")), "output", 2,
                                  random.Random(5))
    assert got_a.pop("segment_path") == str(tmp_path / "a" / "output-2" / "00000000000000000000.log")
    assert got_b.pop("segment_path").startswith("here:")
    assert got_a == got_b and got_a["bytes_garbled"] > 0
    seg = "output-2/00000000000000000000.log"
    assert (tmp_path / "a" / seg).read_bytes() == (tmp_path / "b" / seg).read_bytes() != eos_segment(6)
    assert log_segment.batches((tmp_path / "b" / seg).read_bytes())[0][got_b["batch_index"]].start == \
        got_b["batch_start"]


def test_the_offset_file_is_written_as_libfaketime_reads_it_and_the_library_is_looked_up(tmp_path):
    r = HostRemote()
    f = tmp_path / "clock-offset"
    clock.write_offset(r, PurePosixPath(f), -60)
    assert f.read_text() == "-60\n" and faketime.read_offset(f) == -60
    clock.write_offset(r, PurePosixPath(f), 0)
    assert faketime.read_offset(f) == 0 and not (tmp_path / "clock-offset.tmp").exists()
    found = clock.find_library(r)  # the node's own search, here this host's libfaketime (make clock-prereqs)
    assert found == (str(faketime.library()) if faketime.library() else None)
    assert "apt-get install libfaketime" in clock.missing(r, None) and clock.missing(r, "/x.so.1") is None
    assert clock.preload("/usr/lib/x/libfaketime.so.1", PurePosixPath("/r/clock-offset")) == {
        "LD_PRELOAD": "/usr/lib/x/libfaketime.so.1", "FAKETIME_TIMESTAMP_FILE": "/r/clock-offset",
        "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        "NO_FAKE_STAT": "1"}


class _Live(ClockStandInCluster):
    """A stand-in whose broker logs are read 'where they are written' (``LiveLogs``)."""

    __slots__ = ("live",)

    def broker_log(self, node: int):
        return self.live[node]


def test_a_fault_reads_a_brokers_log_live_when_the_cluster_offers_it_else_through_its_log_files(tmp_path):
    c = ClockStandInCluster(3, tmp_path)
    assert broker_log.broker_log(c, 1) is None and broker_log.size(c, 1) == 0 and broker_log.read_since(c, 1, 0) == ""
    c.logs[2] = tmp_path / "broker-2.log"
    c.logs[2].write_text("a\n")
    assert broker_log.broker_log(c, 2).path == c.logs[2] and broker_log.size(c, 2) == 2
    with open(c.logs[2], "a") as f:
        f.write("b\n")
    assert broker_log.read_since(c, 2, 2) == "b\n"
    live = _Live(3, tmp_path)
    live.live = {1: RemoteLog(HostRemote(), PurePosixPath(tmp_path / "elsewhere.log"))}
    (tmp_path / "elsewhere.log").write_text("x\ny\n")
    assert isinstance(broker_log.broker_log(live, 1), RemoteLog) and broker_log.read_since(live, 1, 2) == "y\n"
