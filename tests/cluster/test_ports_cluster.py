"""Two clusters on one machine, for real: two `onceproof run` started at once both finish with a verdict
(their port leases keep them apart), and a broker whose port is taken by another program moves the
cluster to other ports instead of failing."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.common.ports import free_base_port, ports_dir
from onceproof.backends.local.kafka import KafkaCluster
from onceproof.store.compact import read_text
from tests.conftest import ONCEPROOF, REPO, our_jvms

pytestmark = pytest.mark.cluster


@pytest.mark.extended
def test_two_runs_started_together_both_get_a_verdict(tmp_path):
    roots = [tmp_path / "a", tmp_path / "b"]
    procs = [subprocess.Popen([*ONCEPROOF, "run", "--time-limit", "20", "--seed", str(i),
                               # any verdict will do: no need to wait long for the pipelines to catch up
                               "--recovery-timeout", "10", "--results", str(r)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, r in enumerate(roots)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=900)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out, r in zip(procs, outs, roots):
        assert p.returncode in (0, 1, 2), out[-4000:]
        run_dir = (r / "latest").resolve()
        result = json.loads((run_dir / "results.json").read_text())
        assert result["verdict"] in ("valid", "invalid", "unknown"), result.get("error")
        assert "INCONSISTENT_CLUSTER_ID" not in "".join(read_text(f)  # broker-N.log or, compacted, .log.gz
                                                        for f in (run_dir / "logs").glob("broker-*.log*"))
        assert not our_jvms(str(run_dir))
    for f in ports_dir().glob("*.json"):
        lease = json.loads(f.read_text())
        assert str(tmp_path.resolve()) not in str(lease.get("dir")), f"a finished run left its port lease: {lease}"


def test_a_taken_port_moves_the_cluster_to_another_base(tmp_path):
    base = free_base_port()
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", base + 2))  # broker 2's client port, taken after the reservation
    squatter.listen()
    c = KafkaCluster(ClusterSpec(tmp_path / "c", base_port=base))
    try:
        c.up()
        assert c.spec.base_port != base
        assert str(base + 2) not in c.bootstrap
    finally:
        c.down()
        squatter.close()
    assert not (ports_dir() / f"{c.spec.base_port}.json").exists()
