"""``backends/ssh/inventory.py`` (``nodes.toml``) and ``backends/ssh/remote.py``'s pure parts, on synthetic
files."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from onceproof.backends.ssh import inventory
from onceproof.backends.ssh.inventory import InventoryError
from onceproof.backends.ssh.remote import Completed, RemoteError, deadline_argv

GOOD = """
node = [
  { name = "n1", host = "10.232.7.11", roles = ["broker"] },
  { name = "n2", host = "10.232.7.12", roles = ["broker"], port = 2222, user = "kafka" },
  { name = "n3", host = "10.232.7.13", roles = ["broker"] },
  { name = "n4", host = "10.232.7.14", roles = ["spark-master", "spark-worker", "driver"], address = "n4.lan" },
  { name = "n5", host = "10.232.7.15", roles = ["spark-worker"], key_file = "/keys/n5" },
]

[ssh]
user = "op"
key_file = "keys/onceproof_ed25519"
known_hosts = "~/.ssh/onceproof_known_hosts"

[run]
root = "/srv/onceproof"
lease_s = 30
"""


def _load(tmp_path: Path, text: str):
    p = tmp_path / "nodes.toml"
    p.write_text(text)
    return inventory.load(p)


def test_the_worked_example_reads_with_defaults_and_overrides(tmp_path):
    inv = _load(tmp_path, GOOD)
    assert [n.name for n in inv.brokers] == ["n1", "n2", "n3"]
    assert [n.name for n in inv.with_role("spark-worker")] == ["n4", "n5"]
    n1, n2, n4, n5 = (inv.node(x) for x in ("n1", "n2", "n4", "n5"))
    assert (n1.user, n1.port, n1.address, n1.key_file) == ("op", 22, "10.232.7.11", tmp_path / "keys/onceproof_ed25519")
    assert (n2.user, n2.port) == ("kafka", 2222)
    assert n4.address == "n4.lan" and n4.has("driver") and not n4.has("broker")
    assert n5.key_file == Path("/keys/n5")
    assert inv.ssh.known_hosts == Path("~/.ssh/onceproof_known_hosts").expanduser()
    assert (inv.ssh.become, inv.root, inv.lease_s) == ("sudo", PurePosixPath("/srv/onceproof"), 30.0)
    with pytest.raises(KeyError, match="nodes: n1, n2, n3, n4, n5"):
        inv.node("n9")


@pytest.mark.parametrize("change, message", [
    (("known_hosts = \"~/.ssh/onceproof_known_hosts\"\n", ""), r"ssh\.known_hosts: required .*onceproof ssh trust"),
    (("[ssh]\n", "[ssh]\nbecome = \"doas\"\n"), r"ssh\.become: expected \"sudo\" or \"\""),
    (("[ssh]\n", "[ssh]\npassword = \"x\"\n"), r"ssh\.password: unknown key"),
    (('roles = ["spark-worker"], key', 'roles = ["worker"], key'), r"node\[4\]\.roles: unknown role 'worker'"),
    (('"10.232.7.12"', '"10.232.7.11"'), None),  # same host, other port: allowed
    (('"10.232.7.13"', '"10.232.7.11"'), r"node\[2\]\.host: '10\.232\.7\.11' is also node\[0\]'s"),
    (('name = "n2"', 'name = "n1"'), r"node\[1\]\.name: 'n1' is also node\[0\]'s"),
    (('"spark-master", ', ''), r"exactly one node must have the role 'spark-master', found 0"),
    (('roles = ["spark-worker"], key', 'roles = ["driver"], key'),
     r"exactly one node must have the role 'driver', found 2"),
    (('root = "/srv/onceproof"', 'root = "relative"'), r"run\.root: expected an absolute directory"),
    (('root = "/srv/onceproof"', 'root = "/"'), r"run\.root: expected an absolute directory"),
    (("lease_s = 30", "lease_s = 1"), r"run\.lease_s: expected seconds between 5 and 600"),
    (("port = 2222", "port = 70000"), r"node\[1\]\.port: expected a TCP port"),
    (("[run]", "[runs]"), r"runs: unknown table"),
])
def test_a_rule_broken_names_the_key_and_the_fix(tmp_path, change, message):
    text = GOOD.replace(*change)
    assert text != GOOD
    if message is None:
        _load(tmp_path, text)
        return
    with pytest.raises(InventoryError, match=message) as e:
        _load(tmp_path, text)
    assert str(e.value).startswith(str(tmp_path / "nodes.toml"))


def test_no_broker_no_worker_no_nodes_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(InventoryError, match='no node has the role "broker"'):
        _load(tmp_path, GOOD.replace('roles = ["broker"]', 'roles = ["spark-worker"]'))
    with pytest.raises(InventoryError, match=r"node: expected a list of nodes"):
        _load(tmp_path, '[ssh]\nknown_hosts = "k"\n')
    with pytest.raises(InventoryError, match="no such file; give --nodes"):
        inventory.load(tmp_path / "absent.toml")
    with pytest.raises(InventoryError, match="not TOML"):
        _load(tmp_path, "node = [")


def test_commands_run_under_the_nodes_own_deadline_and_sudo():
    assert deadline_argv(["sleep", "9"], 2.5) == ["timeout", "-k", "5", "2.5", "sleep", "9"]
    assert deadline_argv(["iptables", "-S"], 10, become="sudo") == \
        ["sudo", "-n", "timeout", "-k", "5", "10", "iptables", "-S"]
    with pytest.raises(ValueError):
        deadline_argv([], 1)
    with pytest.raises(ValueError):
        deadline_argv(["true"], 0)
    c = Completed("n1", ("sleep", "9"), 124, "", "", 1.0)
    assert c.timed_out
    with pytest.raises(RemoteError, match=r"\[n1\] sleep 9 timed out"):
        c.check()
    assert Completed("n1", ("true",), 0, "", "", 0.1).check().returncode == 0


def test_the_node_helper_needs_nothing_but_the_standard_library():
    """``node_helper.py`` runs on a node's own python3, which has nothing of onceproof's."""
    import ast
    import sys

    from onceproof.backends.ssh.node import HELPER_SOURCE
    tree = ast.parse(HELPER_SOURCE.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and names <= set(sys.stdlib_module_names)


def test_the_node_helper_refuses_bad_names(tmp_path, capsys):
    from onceproof.backends.ssh import node_helper
    assert node_helper.main(["status", "--root", str(tmp_path), "--run", "../x", "--name", "a"]) == 2
    assert "bad --run" in capsys.readouterr().out
    assert node_helper.main(["status", "--root", str(tmp_path), "--run", "r1", "--name", "a/b"]) == 2
    assert node_helper.main(["status", "--root", str(tmp_path), "--run", "r1", "--name", "absent"]) == 3
    assert node_helper.main(["start", "--root", str(tmp_path), "--run", "r1", "--name", "a", "--log", "x"]) == 2
