"""``partition:isolate`` on the real local cluster cuts the isolated broker's own outbound replica fetches too
(issue 29, item 4): each broker runs in a cgroup v2 of its own, and the isolation adds the path ``out-<i>``,
an iptables chain in ``OUTPUT`` dropping that broker's packets to its peers' inter-broker proxies
(``backends/common/cgroups.py``, ``backends/local/faultproxy.py``). One eos run: valid, the turn effective,
the isolated broker's own packets to its peers counted and dropped, and afterwards no chain, jump or cgroup
of the run left. Needs root (iptables, cgroups); skipped otherwise, saying why."""

import subprocess

import pytest

from onceproof.backends.common import cgroups, iptables
from tests.conftest import load_run, our_processes, run_cli

_WHY = cgroups.unavailable() or iptables.unavailable()
pytestmark = [pytest.mark.cluster, pytest.mark.extended,  # make test: unit/test_cgroups.py cuts a real process
              pytest.mark.skipif(_WHY is not None, reason=f"needs cgroups and iptables: {_WHY}")]


@pytest.mark.timeout(900)
def test_isolate_cuts_the_brokers_outbound_fetches_and_leaves_nothing(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", "partition:isolate", "--time-limit", "30", "--seed", "1",
                 "--results", str(results_root)], timeout=800)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result["counts"], p.stdout[-3000:])
    turns = [o for o in ops if o["type"] == "info" and o.get("f") == "partition:isolate"]
    assert turns and all(o["outcome"] == "effective" for o in turns), turns
    ev = turns[0]["evidence"]
    node = ev["node"]
    assert f"out-{node}" in ev["paths"] and f"out-{node}" in ev["disabled"], ev
    assert ev["outbound_fetches"]["dropped"] > 0, ev  # the broker's own packets to its peers, dropped
    chains = (run_dir / iptables.NOTE).read_text().split()
    assert chains and all(c.endswith(f"-o{n}") for c, n in zip(chains, [t["evidence"]["node"] for t in turns]))
    left = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, timeout=30).stdout
    assert not any(c in left for c in chains), "the run's outbound cut chain or its jump is still there"
    groups = (run_dir / cgroups.NOTED).read_text().split()
    assert len(set(groups)) == 3 and not any((cgroups.root() / g).exists() for g in groups), groups
    assert not our_processes(str(run_dir))
