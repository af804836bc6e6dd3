"""Port leases (backends/common/ports.py): clusters started together on one machine get disjoint ports; a lease
whose owner and brokers are dead is reclaimed; `down` releases it; a broker's bind failure is read from
its log. No broker is started here (see tests/test_ports_cluster.py for the real thing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from onceproof.backends.base import ClusterError
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.common.ports import free_base_port, port_free, ports_dir
from onceproof.backends.local.kafka import KafkaCluster

START = 33090  # away from the default 19090 that real clusters on this machine use


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def free_start() -> int:
    """A start whose first range is free on this machine right now (other tests may hold ports)."""
    for s in range(START, START + 20 * 500, 500):
        if all(port_free(p) for p in ClusterSpec(Path("."), 3, s).ports()):
            return s
    pytest.skip("no free port range to test with")


CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from onceproof.backends.common.ports import free_base_port
    go = Path(sys.argv[1])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)
    print(free_base_port(3, start=int(sys.argv[2]), proxied=sys.argv[3] == "1"), flush=True)
    sys.stdin.read()  # hold the lease (this process is its owner) until the test closes our stdin
""")


def test_concurrent_reservations_get_disjoint_port_ranges(tmp_path, cache):
    start = free_start()
    go = tmp_path / "go"
    env = dict(os.environ, ONCEPROOF_CACHE=str(cache))
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, str(go), str(start), str(i % 2)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(4)]
    try:
        assert all(k.stdout.readline().strip() == "ready" for k in kids)  # all spinning on the go file
        go.write_text("go")
        bases = [int(k.stdout.readline() or -1) for k in kids]
        assert -1 not in bases, [k.stderr.read() for k in kids if k.poll() is not None]
        ranges = [set(ClusterSpec(Path("."), 3, b, proxied=i % 2 == 1).ports()) for i, b in enumerate(bases)]
        for i in range(len(ranges)):
            for j in range(i + 1, len(ranges)):
                assert ranges[i].isdisjoint(ranges[j]), (bases[i], bases[j])
        leases = sorted(p.name for p in ports_dir().glob("*.json"))
        assert leases == sorted(f"{b}.json" for b in bases)
    finally:
        for k in kids:
            k.stdin.close()
            k.wait(timeout=30)


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def write_lease(base: int, owner: dict, brokers: list[dict] = ()) -> Path:
    d = ports_dir()
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{base}.json"
    f.write_text(json.dumps({"base": base, "ports": ClusterSpec(Path("."), 3, base).ports(), "owner": owner,
                             "brokers": list(brokers), "dir": "/somewhere"}))
    return f


def test_a_lease_of_a_dead_process_is_reclaimed():
    start = free_start()
    write_lease(start, {"pid": dead_pid(), "start": time.time() - 5})
    assert free_base_port(3, start=start) == start
    lease = json.loads((ports_dir() / f"{start}.json").read_text())
    assert lease["owner"]["pid"] == os.getpid()


def test_a_reused_pid_does_not_keep_a_lease():
    start = free_start()
    write_lease(start, {"pid": os.getpid(), "start": psutil.Process().create_time() - 1000})  # not us: older
    assert free_base_port(3, start=start) == start


def test_a_live_lease_is_respected_even_when_its_owner_is_gone_but_a_broker_lives():
    start = free_start()
    broker = subprocess.Popen(["sleep", "60"])
    try:
        write_lease(start, {"pid": dead_pid(), "start": 0},
                    [{"pid": broker.pid, "start": psutil.Process(broker.pid).create_time()}])
        assert free_base_port(3, start=start) != start
    finally:
        broker.kill()
        broker.wait()


def test_down_releases_the_lease(tmp_path):
    start = free_start()
    base = free_base_port(3, start=start)
    assert (ports_dir() / f"{base}.json").exists()
    KafkaCluster(ClusterSpec(tmp_path / "c", base_port=base)).down()
    assert not (ports_dir() / f"{base}.json").exists()


def test_a_torn_lease_file_is_dropped():
    start = free_start()
    d = ports_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{start}.json").write_text('{"base": ')
    assert free_base_port(3, start=start) == start


def test_bind_failure_is_read_from_the_logs_written_since_the_mark(tmp_path):
    c = KafkaCluster(ClusterSpec(tmp_path, base_port=START))
    c.spec.logs.mkdir(parents=True)
    log = c.spec.logs / "broker-2.log"
    log.write_text("old: Socket server failed to bind to 127.0.0.1:11111: Address already in use.\n")
    marks = c._log_marks()
    assert c._bind_failure(marks) is None  # an older attempt's failure does not count
    with open(log, "a") as f:
        f.write("[x] ERROR KafkaException: Socket server failed to bind to 127.0.0.1:33192: Address already in use.\n")
    assert c._bind_failure(marks) == 33192
    out = c.spec.logs / "broker-1.out"
    out.write_text("java.net.BindException: Address already in use\n")
    assert c._bind_failure({out: 0}) == "?"


def test_no_range_left_is_a_one_line_error():
    start = free_start()
    write_lease(start, {"pid": os.getpid(), "start": psutil.Process().create_time()})
    with pytest.raises(ClusterError) as e:
        free_base_port(3, start=start, tries=1)
    assert "\n" not in str(e.value) and "ports" in str(e.value)
