"""``backends/ssh/network.py``'s pure rule builders: the iptables rules of each path (both directions, the
run's comment, never port 22) and the tc commands of a bandwidth limit."""

from __future__ import annotations

import pytest

from onceproof.backends.ssh.network import bandwidth_commands, chain_names, loss_rules, path_rules

PORTS = {"client": 9092, "internal": 9093, "controller": 9094}
RUN = "0123456789abcdef"


def test_each_path_is_cut_both_ways_in_the_runs_chains():
    tag = ["-m", "comment", "--comment", "op:01234567:client-1", "-j", "DROP"]
    assert path_rules("client-1", PORTS, RUN) == [
        ("OP-01234567-IN", ["-p", "tcp", "--dport", "9092", *tag]),
        ("OP-01234567-OUT", ["-p", "tcp", "--sport", "9092", *tag])]
    internal = path_rules("internal-2", PORTS, RUN)
    # in: to its port and answers from peers' port; out: from its port and to peers' port (its own fetches)
    assert sorted((c, m[2], m[3]) for c, m in internal) == [
        ("OP-01234567-IN", "--dport", "9093"), ("OP-01234567-IN", "--sport", "9093"),
        ("OP-01234567-OUT", "--dport", "9093"), ("OP-01234567-OUT", "--sport", "9093")]
    assert {m[3] for _, m in path_rules("ctrl-3", PORTS, RUN)} == {"9094"}
    every = [m for p in ("client-1", "internal-1", "ctrl-1") for _, m in path_rules(p, PORTS, RUN)]
    assert all("22" not in m and m[-2:] == ["-j", "DROP"] for m in every)
    with pytest.raises(ValueError, match="unknown path"):
        path_rules("node-1", PORTS, RUN)
    assert chain_names(RUN) == ("OP-01234567-IN", "OP-01234567-OUT")


def test_loss_and_bandwidth():
    rules = loss_rules(PORTS, 0.1, RUN)
    assert [m[3] for _, m in rules] == ["9092", "9093"]
    assert all(m[4:10] == ["-m", "statistic", "--mode", "random", "--probability", "0.1"] for _, m in rules)
    with pytest.raises(ValueError):
        loss_rules(PORTS, 1.0, RUN)
    cmds = bandwidth_commands("eth0", 9092, 32)
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "4f50:", "htb", "default", "10"]
    assert "256kbit" in cmds[2] and cmds[3][-6:] == ["rate", "256kbit", "burst", "16kb", "latency", "200ms"]
    assert cmds[-1][cmds[-1].index("sport") + 1] == "9092" and cmds[-1][-1] == "4f50:20"


def test_every_control_file_name_is_classified_by_who_writes_it():
    """A new hook file must say whether the harness or the pipeline writes it: the ssh relay copies the
    first kind to the nodes and the second kind back."""
    from onceproof.pipeline import hooks
    names = {v for k, v in vars(hooks).items() if k.isupper() and isinstance(v, str) and k != "ZOMBIE"}
    names |= {hooks.ZOMBIE.format(stage=s) for s in hooks.ZOMBIE_STAGES}
    assert names == set(hooks.HARNESS_WRITES) | set(hooks.PIPELINE_WRITES)
    assert not set(hooks.HARNESS_WRITES) & set(hooks.PIPELINE_WRITES)
