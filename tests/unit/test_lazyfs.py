"""The lazyfs layer (backends/common/lazyfs.py), ``lose-unsynced-writes``'s disk.

Two halves. The first drives the file system's operations in this process over a scratch directory, as
libfuse would call them, without mounting anything: what a ``crash`` puts back (the synced size, the synced
bytes an overwrite or a truncate changed), what an ``fsync`` makes durable, what names do (kept at once).
The second mounts the layer for real (marker ``fuse``: needs ``/dev/fuse``, libfuse 3 and mfusepy, and
skips naming what is missing; ``make fuse-prereqs`` installs Debian's fuse3): plain writes, ``mmap`` writes,
renames, unmount on stop, and the dead mount of a SIGKILLed layer detached by :func:`unmount_noted` and by
the reaper of a SIGKILLed harness. No mocks: real files, a real FUSE mount, real processes."""

import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from onceproof.backends.common import lazyfs
from onceproof.backends.common.lazyfs import PAGE, Layer, _LazyOps, answer, mounted, mounts, unmount_noted

O_NEW = os.O_CREAT | os.O_RDWR


# ------------------------------------------------------------------------ the operations, in this process

@pytest.fixture
def ops(tmp_path):
    back = tmp_path / "back"
    back.mkdir()
    o = _LazyOps(str(back))
    yield o
    for fh in list(o.handles):
        o.release(None, fh)
    o.crash(settle_s=0)


def _write(o: _LazyOps, fh: int, data: bytes, off: int) -> None:
    assert o.write(None, data, off, fh) == len(data)


def _backing(o: _LazyOps, name: str) -> bytes:
    return (Path(o.root) / name).read_bytes()


def test_crash_drops_the_unsynced_tail_and_keeps_the_synced_part(ops):
    fh = ops.create("/seg.log", 0o644, O_NEW)
    _write(ops, fh, b"A" * 10_000, 0)
    ops.fsync(None, 0, fh)
    _write(ops, fh, b"B" * 5_000, 10_000)
    rep = ops.report()
    assert rep["unsynced_bytes"] == 5_000 and rep["files"][0]["synced_size"] == 10_000
    assert rep["preimage_bytes"] == 0  # an append past the synced size needs no pre-image
    out = ops.crash(settle_s=0.1)
    assert out["files"]["/seg.log"] == {"written": 5_000, "writes": 1, "size_before": 15_000, "synced_size": 10_000,
                                        "cut_bytes": 5_000, "restored_pages": 0, "restored_bytes": 0}
    assert out["dropped_bytes"] == 5_000 and out["open_handles"] == 1 and out["settle_s"] >= 0.1
    assert _backing(ops, "seg.log") == b"A" * 10_000
    assert ops.report()["unsynced_files"] == 0  # forgotten: a second crash drops nothing
    assert ops.crash(settle_s=0)["dropped_files"] == 0


def test_an_overwrite_of_synced_bytes_is_put_back_page_by_page(ops):
    fh = ops.create("/index", 0o644, O_NEW)
    synced = bytes(range(256)) * 40  # 10,240 bytes: pages 0, 1 and part of 2
    _write(ops, fh, synced, 0)
    ops.fsync(None, 1, fh)  # fdatasync counts as a sync too
    _write(ops, fh, b"X" * 100, PAGE - 50)  # straddles pages 0 and 1
    _write(ops, fh, b"Y" * 10, PAGE + 5)  # page 1 again: its pre-image is kept once
    _write(ops, fh, b"Z" * 3_000, 10_000)  # the part of page 2 below 10,240, and beyond
    rep = ops.report()["files"][0]
    assert rep["preimage_pages"] == 3 and rep["preimage_bytes"] == PAGE + PAGE + (10_240 - 2 * PAGE)
    out = ops.crash(settle_s=0)["files"]["/index"]
    assert out["restored_pages"] == 3 and out["cut_bytes"] == 13_000 - 10_240
    assert _backing(ops, "index") == synced


def test_truncates_are_volatile_both_ways(ops):
    fh = ops.create("/f", 0o644, O_NEW)
    _write(ops, fh, b"S" * 9_000, 0)
    ops.fsync(None, 0, fh)
    ops.truncate(None, 1_000, fh)  # shrink below the synced size: the cut pages are kept first
    ops.truncate("/f", 20 * 1024 * 1024)  # extend (a preallocated Kafka index): nothing to keep
    assert (Path(ops.root) / "f").stat().st_size == 20 * 1024 * 1024
    out = ops.crash(settle_s=0)["files"]["/f"]
    assert out["synced_size"] == 9_000 and out["written"] == 0
    assert _backing(ops, "f") == b"S" * 9_000


def test_open_with_o_trunc_goes_through_the_undo_log(ops):
    fh = ops.create("/cp", 0o644, O_NEW)
    _write(ops, fh, b"old checkpoint\n", 0)
    ops.fsync(None, 0, fh)
    ops.release(None, fh)
    fh = ops.open("/cp", os.O_WRONLY | os.O_TRUNC)
    _write(ops, fh, b"new\n", 0)
    ops.crash(settle_s=0)
    assert _backing(ops, "cp") == b"old checkpoint\n"


def test_names_are_durable_at_once_and_a_new_unsynced_file_survives_empty(ops):
    fh = ops.create("/new.tmp", 0o644, O_NEW)
    _write(ops, fh, b"never synced", 0)
    ops.rename("/new.tmp", "/new")  # the record follows the file, not the name
    assert ops.report()["files"][0]["path"] == "/new"
    ops.mkdir("/d", 0o755)
    ops.crash(settle_s=0)
    assert _backing(ops, "new") == b"" and (Path(ops.root) / "d").is_dir()
    assert not (Path(ops.root) / "new.tmp").exists()


def test_an_unlinked_or_renamed_over_file_is_forgotten(ops):
    a = ops.create("/a", 0o644, O_NEW)
    _write(ops, a, b"a" * 100, 0)
    b = ops.create("/b", 0o644, O_NEW)
    _write(ops, b, b"b" * 100, 0)
    ops.rename("/b", "/a")  # a's file has no name left
    c = ops.create("/c", 0o644, O_NEW)
    _write(ops, c, b"c", 0)
    ops.unlink("/c")
    assert [f["path"] for f in ops.report()["files"]] == ["/a"]  # b's file, now named /a
    ops.crash(settle_s=0)
    assert _backing(ops, "a") == b""


def test_a_handle_renamed_away_and_unlinked_still_writes_and_crashes(ops):
    fh = ops.create("/00.cleaned", 0o644, O_NEW)
    ops.rename("/00.cleaned", "/00.swap")  # Kafka's cleaner renames files it still has open
    _write(ops, fh, b"w" * 64, 0)  # the record is opened from the handle, not the stale name
    assert ops.report()["files"][0]["written"] == 64
    ops.crash(settle_s=0)
    assert _backing(ops, "00.swap") == b""


def test_a_synced_file_with_a_directory_rename_keeps_its_new_path(ops):
    ops.mkdir("/topic-0", 0o755)
    fh = ops.create("/topic-0/00.log", 0o644, O_NEW)
    _write(ops, fh, b"1" * 10, 0)
    ops.rename("/topic-0", "/topic-0.deleted")
    assert ops.report()["files"][0]["path"] == "/topic-0.deleted/00.log"


def test_checkpoint_makes_everything_durable(ops):
    fh = ops.create("/meta.properties", 0o644, O_NEW)
    _write(ops, fh, b"node.id=1\n", 0)
    assert ops.checkpoint() == {"synced_files": 1, "synced_bytes": 10}
    assert ops.crash(settle_s=0)["dropped_files"] == 0
    assert _backing(ops, "meta.properties") == b"node.id=1\n"


def test_commands_and_lazyfs_names(ops):
    assert answer(ops, '{"cmd": "ping"}')["ok"]
    assert answer(ops, "lazyfs::clear-cache")["dropped_files"] == 0  # LazyFS's FIFO name for crash
    assert answer(ops, "lazyfs::unsynced-data-report")["unsynced_files"] == 0
    bad = answer(ops, "lazyfs::torn-op::file=x")
    assert not bad["ok"] and "unknown command" in bad["error"]


def test_mounts_reads_mountinfo_with_escapes(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
        "50 36 0:45 / /tmp/a\\040b/data rw,nosuid,nodev,relatime shared:9 - fuse.onceproof-lazyfs onceproof-lazyfs "
        "rw,user_id=0,group_id=0\n"
        "51 36 0:46 / /tmp/other rw - fuse.sshfs host: rw\n")
    assert mounts(mountinfo=info) == ["/tmp/a b/data"]
    assert mounts("fuse.sshfs", mountinfo=info) == ["/tmp/other"]
    assert mounts(mountinfo=tmp_path / "missing") == []


def test_unmount_noted_without_a_list_or_a_mount(tmp_path):
    assert unmount_noted(str(tmp_path)) == []
    lazyfs.note(tmp_path / "never-mounted", run_dir=str(tmp_path))
    assert (tmp_path / lazyfs.NOTED).read_text().strip() == str(tmp_path / "never-mounted")
    assert unmount_noted(str(tmp_path)) == []


# ------------------------------------------------------------------------ a real mount

fuse = pytest.mark.skipif(lazyfs.unavailable() is not None, reason=f"no FUSE here: {lazyfs.unavailable()}")


@pytest.fixture
def layer(tmp_path):
    lay = Layer(tmp_path / "back", tmp_path / "mnt", tmp_path / "ctl.sock", tmp_path / "layer.log")
    lay.start()
    yield lay
    lay.stop()
    assert not mounted(lay.mount)


@fuse
def test_mounted_layer_loses_the_unsynced_tail_only(layer):
    f = layer.mount / "00000000000000000000.log"
    fd = os.open(f, O_NEW, 0o644)
    os.write(fd, b"A" * 100_000)
    os.fsync(fd)
    os.write(fd, b"B" * 30_000)
    os.pwrite(fd, b"C" * 10, 5)  # over synced bytes
    os.close(fd)
    assert layer.report()["unsynced_bytes"] == 30_010
    out = layer.crash()
    assert out["dropped_bytes"] == 30_010 and out["files"]["/00000000000000000000.log"]["cut_bytes"] == 30_000
    assert out["open_handles"] == 0  # the close's release came within the settle wait
    assert f.read_bytes() == b"A" * 100_000  # through the mount: the kernel asked again
    assert (layer.backing / f.name).read_bytes() == b"A" * 100_000


@fuse
def test_mounted_layer_mmap_writes_count_once_msynced(layer):
    f = layer.mount / "00.index"
    fd = os.open(f, O_NEW, 0o644)
    os.ftruncate(fd, 2 * PAGE)  # a preallocated index
    os.fsync(fd)
    m = mmap.mmap(fd, 2 * PAGE)
    m[0:8] = b"synced!!"
    m.flush()  # msync(MS_SYNC): the pages reach the layer, then its fsync
    m[PAGE:PAGE + 8] = b"unsynced"
    m.close()  # munmap: FUSE writes the dirty page back (a plain write, not a sync)
    os.close(fd)
    layer.crash()
    data = f.read_bytes()
    assert data[:8] == b"synced!!" and data[PAGE:PAGE + 8] == b"\0" * 8 and len(data) == 2 * PAGE


@fuse
def test_mounted_layer_keeps_renames_and_creates(layer):
    d = layer.mount / "input-0"
    d.mkdir()
    tmp = d / "leader-epoch-checkpoint.tmp"
    tmp.write_bytes(b"0\n1\n0 0\n")
    fd = os.open(tmp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, d / "leader-epoch-checkpoint")  # Kafka's write-fsync-rename
    (d / "unsynced.tmp").write_bytes(b"lost")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)  # a directory fsync passes
    os.close(dfd)
    layer.crash()
    assert sorted(p.name for p in d.iterdir()) == ["leader-epoch-checkpoint", "unsynced.tmp"]
    assert (d / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
    assert (d / "unsynced.tmp").read_bytes() == b""


@fuse
def test_a_sigkilled_layer_leaves_a_dead_mount_that_unmount_noted_detaches(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("ONCEPROOF_RUN", str(run))
    lay = Layer(tmp_path / "back", tmp_path / "mnt", tmp_path / "ctl.sock", tmp_path / "layer.log")
    lay.start()
    try:
        assert (run / lazyfs.NOTED).read_text().split() == [str(tmp_path / "mnt")]
        lay.proc.kill()
        lay.proc.wait(timeout=5)
        assert mounted(lay.mount)  # still in the mount table, its server gone
        with pytest.raises(OSError):
            os.listdir(lay.mount)  # ENOTCONN: "Transport endpoint is not connected"
        assert unmount_noted(str(run)) == [str(tmp_path / "mnt")]
        assert not mounted(lay.mount) and os.listdir(lay.mount) == []
    finally:
        lay.stop()


HARNESS = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from onceproof.backends.common import reaper
    from onceproof.backends.common.lazyfs import Layer
    run, base = sys.argv[1], Path(sys.argv[2])
    os.environ["ONCEPROOF_RUN"] = run
    lay = Layer(base / "back", base / "mnt", base / "ctl.sock", base / "layer.log")
    lay.start()
    w = reaper.start(run)
    print(lay.proc.pid, w.pid, flush=True)
    time.sleep(120)
""")


def _dead(pid: int, wait_s: float = 10.0) -> None:
    """Wait until ``pid`` (not our child: a zombie until its parent reaps it) is dead."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still alive after {wait_s} s")


@fuse
def test_the_reaper_of_a_sigkilled_harness_unmounts_a_killed_layer(tmp_path):
    """The worst case: the layer SIGKILLed first (no unmount of its own), then the harness; the reaper sweeps
    the run's processes and detaches the dead mount it finds noted in the run directory."""
    run = tmp_path / "run"
    run.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    h = subprocess.Popen([sys.executable, "-c", HARNESS, str(run), str(tmp_path)], stdout=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    try:
        layer_pid, watcher_pid = map(int, h.stdout.readline().split())
        os.kill(layer_pid, signal.SIGKILL)
        _dead(layer_pid)
        assert mounted(tmp_path / "mnt")
        h.kill()
        h.wait(timeout=5)
        _dead(watcher_pid, 30)
        deadline = time.monotonic() + 5
        while mounted(tmp_path / "mnt") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not mounted(tmp_path / "mnt")
    finally:
        h.kill()
        lazyfs.unmount(tmp_path / "mnt")


@fuse
def test_a_layer_whose_parent_dies_unmounts_itself(tmp_path):
    """PR_SET_PDEATHSIG = SIGTERM: the layer outlives no harness, and unmounts on its way out."""
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from onceproof.backends.common.lazyfs import Layer
        base = Path(sys.argv[1])
        lay = Layer(base / "back", base / "mnt", base / "ctl.sock", base / "layer.log")
        lay.start()
        print(lay.proc.pid, flush=True)
        time.sleep(120)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    h = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid = int(h.stdout.readline())
        assert mounted(tmp_path / "mnt")
        h.kill()
        h.wait(timeout=5)
        _dead(pid)
        assert not mounted(tmp_path / "mnt")
    finally:
        h.kill()
        lazyfs.unmount(tmp_path / "mnt")


@fuse
def test_the_request_mode_reaches_a_layer_as_the_ssh_backend_does(layer, tmp_path):
    """``lazyfs.py --control SOCKET --request CMD`` run as its own file (as shipped to a node, with
    ``mfusepy`` beside it on ``PYTHONPATH``): one JSON line with the layer's reply; no layer, an error and
    exit 1."""
    import json
    import subprocess
    import sys

    from onceproof.backends.common import lazyfs

    def req(control, cmd):
        p = subprocess.run([sys.executable, lazyfs.__file__, "--control", str(control), "--request", cmd],
                           capture_output=True, text=True, timeout=30)
        return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])
    fd = os.open(layer.mount / "x.log", O_NEW, 0o644)
    os.write(fd, b"u" * 5000)
    os.close(fd)
    rc, pong = req(layer.control, "ping")
    assert rc == 0 and pong["ok"] and pong["pid"] == layer.proc.pid
    rc, rep = req(layer.control, "report")
    assert rc == 0 and rep["unsynced_bytes"] == 5000
    rc, err = req(tmp_path / "nobody.sock", "ping")
    assert rc == 1 and "error" in err
