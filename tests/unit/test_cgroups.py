"""A broker's own outbound connections told apart on loopback (``backends/common/cgroups.py`` and
``iptables.install_cut``): the rule builders on synthetic input, and, where this host allows (root, cgroup2,
the iptables ``cgroup`` match), a real process in a group of its own whose connection to a port is dropped
while another process's connection to the same port goes through."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import pytest

from onceproof.backends.common import cgroups, iptables

MOUNTINFO = """\
25 1 0:23 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
33 25 0:28 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
34 25 0:29 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
"""


def test_the_cgroup2_root_and_a_brokers_group_come_from_mountinfo_and_the_data_dir(tmp_path):
    (tmp_path / "mi").write_text(MOUNTINFO)
    assert str(cgroups.root(tmp_path / "mi")) == "/sys/fs/cgroup/unified"
    (tmp_path / "none").write_text(MOUNTINFO.splitlines()[0] + "\n")
    assert cgroups.root(tmp_path / "none") is None
    g = cgroups.group_of("/r/run/cluster", 2)
    assert g.startswith("onceproof-") and g.endswith("/node2") and g == cgroups.group_of("/r/run/cluster", 2)
    assert g.split("/")[0] != cgroups.group_of("/r/other/cluster", 2).split("/")[0]


def test_a_cut_drops_the_groups_packets_to_each_port_and_counts_them():
    rules = iptables.cut_rules("OP-0123abcd-o2", "onceproof-x/node2", [19101, 19103])
    assert rules[1] == ["-A", "OP-0123abcd-o2", "-p", "tcp", "--dport", "19101", "-m", "cgroup", "--path",
                        "onceproof-x/node2", "-j", "DROP"]
    assert len(rules) == 4 and rules[0] == rules[1][:-2]
    assert iptables.cut_jump_rule("OP-0123abcd-o2") == ["OUTPUT", "-o", "lo", "-p", "tcp", "-j", "OP-0123abcd-o2"]
    for bad in ("/abs", "", "a/../b"):
        with pytest.raises(ValueError, match="relative"):
            iptables.cut_rules("OP-0123abcd-o2", bad, [1])
    with pytest.raises(ValueError, match="ports"):
        iptables.cut_rules("OP-0123abcd-o2", "g", [])


_CONNECT = """
import socket, sys
sys.stdin.readline()
s = socket.socket(); s.settimeout(1.5)
try:
    s.connect(("127.0.0.1", int(sys.argv[1]))); print("connected")
except OSError as e:
    print("failed", type(e).__name__)
"""


def _connect(port: int, group: str | None) -> str:
    p = subprocess.Popen([sys.executable, "-c", _CONNECT, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    if group:
        cgroups.place(p.pid, group)  # before it opens its socket (it waits for a line first)
    out, _ = p.communicate("go\n", timeout=15)
    return out.strip()


def test_a_process_in_its_own_group_is_cut_and_another_is_not(tmp_path):
    why = cgroups.unavailable() or iptables.unavailable()
    if why:
        pytest.skip(why)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    group = cgroups.group_of(str(tmp_path), 1)
    chain = iptables.chain_name(f"test-{uuid.uuid4().hex}") + "-o1"
    try:
        cgroups.make(group)
        iptables.install_cut(chain, group, [port])
        assert _connect(port, group) == "failed TimeoutError"
        assert _connect(port, None) == "connected"
        assert iptables.counters(chain)["dropped"] >= 1
    finally:
        assert iptables.remove(chain) == []
        srv.close()
    assert cgroups.remove(group) and not (cgroups.root() / group.split("/")[0]).exists()


def test_isolation_adds_the_outbound_path_only_for_a_broker_in_its_own_group(tmp_path):
    from onceproof.backends.common.layout import ClusterSpec
    from onceproof.backends.local.faultproxy import ProxyNetwork
    from onceproof.backends.local.kafka import KafkaCluster
    from onceproof.nemesis import catalog

    spec = ClusterSpec(tmp_path, nodes=3, proxied=True)
    net = ProxyNetwork(spec, tmp_path / "toxiproxy.log", outbound=lambda n: "onceproof-x/node2" if n == 2 else None)
    assert net.isolation_paths(2)[-1] == "out-2" and "out-1" not in net.isolation_paths(1)
    assert "out-3" not in ProxyNetwork(spec, tmp_path / "t.log").isolation_paths(3)  # no groups: no such path
    plain, grouped = KafkaCluster(spec), KafkaCluster(spec, own_groups=True)
    assert plain.outbound_group(1) is None and grouped.outbound_group(1) == cgroups.group_of(str(tmp_path), 1)
    grouped.group_error = "refused"
    assert grouped.outbound_group(1) is None  # a broker left in the harness's group is not singled out
    assert catalog.needs_own_groups(["partition"]) and catalog.needs_own_groups(["kill-broker", "partition:isolate"])
    assert not catalog.needs_own_groups(["partition:client", "lossy-link:drop"])
