"""backends/docker/engine.py: reuse a running engine, start and stop our own dockerd, never stop another.

The tests that start a daemon start a *second* one on a private socket and directories (no bridge, no
iptables), so the engine a session already uses is never touched; they need root and ``dockerd`` and are
skipped otherwise.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from onceproof.backends.docker import engine as eng_mod
from onceproof.backends.docker.engine import DockerEngine, EngineError, ping, stop_started

DOCKERD = shutil.which("dockerd") or ("/usr/sbin/dockerd" if os.path.exists("/usr/sbin/dockerd") else None)
_skip = pytest.mark.skipif(DOCKERD is None or os.geteuid() != 0 or shutil.which("unshare") is None,
                           reason="needs root, dockerd (make docker-images installs docker.io) and unshare")


def needs_dockerd(f):
    """Starts a private dockerd: marked ``docker`` (not in `make unit`), skipped without root/dockerd."""
    return pytest.mark.docker(_skip(f))


def _host_links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


@pytest.fixture(autouse=True)
def host_network_untouched():
    """No test may add or remove a network interface of the host (the machine's engine needs docker0)."""
    before = _host_links()
    yield
    assert _host_links() == before


@pytest.fixture
def short_dir():
    """A short directory (containerd's socket path under it must stay below 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="op-eng-", dir="/tmp"))
    yield d
    subprocess.run(["rm", "-rf", "--one-file-system", str(d)], check=False)


class _PrivateEngine(DockerEngine):
    """A dockerd that cannot touch the machine's engine: own socket and directories, and its own network
    namespace (``unshare --net``). Not ``--bridge=none``: a daemon started so deletes the host's
    ``docker0`` interface, which the machine's engine needs (seen here)."""

    def _launch(self, binary: str) -> None:  # noqa: D401 - runs the real launch through a wrapper
        wrapper = self.root / "dockerd"  # keeps the name 'dockerd' so that _proc_matches recognises it
        self.root.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(f"#!/bin/sh\nexec unshare --net -- {binary} \"$@\"\n")
        wrapper.chmod(0o755)
        super()._launch(str(wrapper))


def test_an_unanswering_tcp_host_is_not_served_by_a_local_daemon(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # discard port: nothing answers
    with pytest.raises(EngineError, match="DOCKER_HOST=tcp://127.0.0.1:9"):
        DockerEngine(start_timeout_s=5).start()


def test_missing_dockerd_names_the_fix(short_dir):
    if os.geteuid() != 0:
        pytest.skip("the root check comes first")
    e = DockerEngine(f"unix://{short_dir}/none.sock", root=short_dir / "eng", dockerd="/nonexistent/dockerd")
    with pytest.raises(EngineError, match="make docker-images"):
        e.start()


def test_stop_started_leaves_a_process_that_is_not_our_dockerd_alone(short_dir):
    """A state file naming a live process that is not our dockerd (a reused pid) must not get it killed."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        root = short_dir / "eng"
        root.mkdir()
        (root / "engine.json").write_text(json.dumps({
            "pid": victim.pid, "create_time": psutil.Process(victim.pid).create_time(),
            "data_root": str(root / "data")}))
        assert stop_started(root, timeout_s=1) is False
        time.sleep(0.2)
        assert victim.poll() is None, "stop_started killed a process it had not started"
    finally:
        victim.kill()
        victim.wait()


@needs_dockerd
def test_a_running_engine_is_used_and_never_stopped(short_dir):
    with _PrivateEngine(f"unix://{short_dir}/d.sock", root=short_dir / "eng", nice=19) as first:
        assert first.started
        second = DockerEngine(first.host, root=short_dir / "other").start()
        assert second.client.info()["ID"] == first.client.info()["ID"]
        assert not second.started and second.pid is None
        assert second.stop() is False
        assert ping(first.host) is not None, "stopping the second handle stopped an engine it had not started"


@needs_dockerd
def test_starts_its_own_dockerd_niced_and_stops_it_with_its_containerd(short_dir):
    host = f"unix://{short_dir}/d.sock"
    e = _PrivateEngine(host, root=short_dir / "eng", nice=19, start_timeout_s=60)
    t0 = time.monotonic()
    e.start()
    try:
        started_s = time.monotonic() - t0
        assert e.started and e.pid is not None
        assert e.client.ping()
        proc = psutil.Process(e.pid)
        assert proc.nice() == 19
        assert proc.ionice().ioclass == psutil.IOPRIO_CLASS_IDLE
        assert f"--data-root={e.data_root}" in proc.cmdline()
        helpers = [p for p in eng_mod._ours(e.root) if p.pid != e.pid]
        assert helpers, "no managed containerd found under the exec-root"
        st = json.loads(e.state_file.read_text())
        assert st["pid"] == e.pid and st["data_root"] == str(e.data_root)
        assert started_s < 60
    finally:
        t1 = time.monotonic()
        assert e.stop(timeout_s=20) is True
        stop_s = time.monotonic() - t1
    assert not psutil.pid_exists(proc.pid) or proc.status() == psutil.STATUS_ZOMBIE
    assert not [p for p in helpers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert ping(host, timeout_s=2) is None
    assert not e.state_file.exists()
    assert stop_s < 40
    assert e.stop() is False  # twice is fine


@needs_dockerd
def test_stop_started_from_another_handle(short_dir):
    e = _PrivateEngine(f"unix://{short_dir}/d.sock", root=short_dir / "eng", nice=19).start()
    pid = e.pid
    assert stop_started(short_dir / "eng", timeout_s=20) is True
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    e._popen.wait(timeout=5)
    assert not os.path.ismount(short_dir / "eng" / "data")


def test_priority_prefix_is_absolute_and_sets_the_io_class():
    assert eng_mod.priority_prefix(19, 0) == ["nice", "-n", "19", "ionice", "-c3"]
    assert eng_mod.priority_prefix(19, 19) == ["ionice", "-c3"]
    assert eng_mod.priority_prefix(0, 19) == ["nice", "-n", "-19", "ionice", "-c2", "-n4"]
    assert eng_mod.priority_prefix(5, 10, ionice=False) == ["nice", "-n", "-5"]


@needs_dockerd
def test_nice_is_absolute_whatever_the_caller_runs_at(short_dir):
    """nice=5 gives niceness 5 even from a caller at another niceness (`nice -n 19 pytest` or not):
    containers inherit the daemon's priority, so it must not depend on who started it."""
    with _PrivateEngine(f"unix://{short_dir}/d.sock", root=short_dir / "eng", nice=5) as e:
        proc = psutil.Process(e.pid)
        assert proc.nice() == 5
        assert proc.ionice().ioclass == psutil.IOPRIO_CLASS_IDLE
