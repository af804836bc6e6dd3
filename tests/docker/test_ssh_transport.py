"""The ssh backend's transport (``backends/ssh/transport.py``) against real sshd: two ``onceproof/node``
containers reached over SSH only (``tests/docker/ssh_nodes.py``). No mock: each assertion is about what
a real OpenSSH server and a real node did.

One pair of nodes carries every check (about 10 s once the image is built).
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath

import pytest

from onceproof.backends.ssh import inventory, transport
from onceproof.backends.ssh.transport import HostKeyError, SshError, SshHub
from tests.conftest import run_cli
from tests.docker.ssh_nodes import new_key, nodes  # noqa: F401 (nodes: a fixture, used by name)

pytestmark = pytest.mark.docker


def test_commands_files_root_and_deadlines_over_real_ssh(nodes, tmp_path):
    inv = inventory.load(nodes.nodes_toml)
    with SshHub(inv) as hub:
        hub.connect_all()
        n1, n2 = hub.remote("n1"), hub.remote("n2")

        # a command's output, its exit status, its stdin; each node is the machine it says it is
        assert n1.run(["uname", "-n"]).check().stdout.strip() == "n1"
        assert n2.run(["uname", "-n"]).check().stdout.strip() == "n2"
        failed = n1.run(["sh", "-c", "echo oops >&2; exit 3"])
        assert (failed.returncode, failed.stderr.strip()) == (3, "oops")
        with pytest.raises(transport.RemoteError, match=r"\[n1\] sh -c .* exited 3: oops"):
            failed.check()
        assert n1.run(["cat"], stdin="through stdin\n").stdout == "through stdin\n"
        # argv is quoted for the remote shell: a metacharacter stays an argument
        assert n1.run(["echo", "a;b", "$HOME"]).stdout.strip() == "a;b $HOME"

        # root through become = "sudo" (sudo -n), the login user otherwise
        assert n1.run(["id", "-un"]).stdout.strip() == "op"
        assert n1.run(["id", "-u"], root=True).check().stdout.strip() == "0"

        # the deadline holds on the node: timeout -k ends the command, nothing of it is left running
        t0 = time.monotonic()
        slow = n2.run(["sleep", "37"], timeout_s=1)
        assert slow.timed_out and slow.returncode == 124 and time.monotonic() - t0 < 6
        assert n2.run(["pgrep", "-x", "sleep"]).returncode == 1, "the remote sleep outlived its deadline"

        # files both ways, written atomically (no .partial left), with a mode
        src = tmp_path / "payload.bin"
        src.write_bytes(bytes(range(256)) * 4096)
        n2.put(src, PurePosixPath("/tmp/payload.bin"), mode=0o750)
        listing = n2.run(["stat", "-c", "%s %a", "/tmp/payload.bin"]).check().stdout.split()
        assert listing == [str(src.stat().st_size), "750"]
        assert n2.run(["ls", "/tmp/payload.bin.partial"]).returncode != 0
        back = tmp_path / "back.bin"
        n2.get(PurePosixPath("/tmp/payload.bin"), back)
        assert back.read_bytes() == src.read_bytes()

        # one connection per node, reused; a dropped one is reopened on the next call
        conn = hub._conns["n1"]
        assert n1.run(["true"]).returncode == 0 and hub._conns["n1"] is conn
        hub.drop("n1")
        assert n1.run(["true"]).returncode == 0 and hub._conns["n1"] is not conn
    assert hub._closed and not hub._thread.is_alive()


def test_unknown_and_changed_host_keys_are_refused_and_trust_asks(nodes, tmp_path):
    real = inventory.load(nodes.nodes_toml)
    fp = {n.name: transport.offered_key(n.host, n.port).get_fingerprint() for n in real.nodes}

    # unknown: an empty known_hosts file trusts nothing
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    inv = inventory.load(_with_known_hosts(nodes, tmp_path, empty))
    with SshHub(inv) as hub, pytest.raises(HostKeyError) as e:
        hub.remote("n1").run(["true"])
    assert not e.value.changed and e.value.fingerprint == fp["n1"]
    assert "is unknown" in str(e.value) and "onceproof ssh trust" in str(e.value)

    # changed: known_hosts holds n2's key under n1's address
    swapped = tmp_path / "swapped_known_hosts"
    lines = nodes.known_hosts.read_text().splitlines()
    swapped.write_text(f"{real.node('n1').host} {lines[1].split(' ', 1)[1]}\n")
    inv = inventory.load(_with_known_hosts(nodes, tmp_path, swapped))
    with SshHub(inv) as hub, pytest.raises(HostKeyError) as e:
        hub.connect_all()
    msg = str(e.value)
    assert e.value.changed and e.value.node == "n1", msg
    assert fp["n1"] in msg and fp["n2"] in msg, msg
    with pytest.raises(HostKeyError, match="holds another key"):
        transport.trust(inv, lambda node, f: True)

    # trust: declined adds nothing; accepted adds exactly the offered keys, which then connect
    fresh = tmp_path / "fresh_known_hosts"
    inv = inventory.load(_with_known_hosts(nodes, tmp_path, fresh))
    asked = []
    assert [r[2] for r in transport.trust(inv, lambda node, f: asked.append((node.name, f)) or False)] == \
        ["declined", "declined"]
    assert asked == [("n1", fp["n1"]), ("n2", fp["n2"])] and not fresh.exists()
    assert [r[2] for r in transport.trust(inv, lambda node, f: True)] == ["added", "added"]
    assert [r[2] for r in transport.trust(inv, lambda node, f: pytest.fail("asked again"))] == ["trusted", "trusted"]
    with SshHub(inv) as hub:
        hub.connect_all()
        assert hub.remote("n2").run(["uname", "-n"]).stdout.strip() == "n2"


def test_a_key_the_node_does_not_accept_is_named(nodes, tmp_path):
    other = tmp_path / "other_key"
    new_key(other)
    text = nodes.nodes_toml.read_text().replace(str(nodes.key_file), str(other))
    p = tmp_path / "nodes.toml"
    p.write_text(text)
    with SshHub(inventory.load(p)) as hub, pytest.raises(SshError, match="refused the key .*authorized_keys"):
        hub.remote("n1").run(["true"])


def test_the_ssh_commands(nodes, tmp_path):
    """``onceproof ssh check`` and ``ssh trust`` as a user runs them (subprocesses, no terminal)."""
    r = run_cli(["ssh", "check", "--nodes", str(nodes.nodes_toml)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("n")]
    assert len(lines) == 2 and all(" ok " in ln and 'version "17' in ln and "python 3.11" in ln and "sudo ok" in ln
                                   and "libfaketime ok" in ln for ln in lines), r.stdout

    fresh = tmp_path / "fresh_known_hosts"
    toml = _with_known_hosts(nodes, tmp_path, fresh)
    r = run_cli(["ssh", "trust", "--nodes", toml], timeout=120)
    assert r.returncode == 254 and "needs a terminal" in r.stderr and not fresh.exists(), r.stderr
    r = run_cli(["ssh", "trust", "--nodes", toml, "--yes"], timeout=120)
    assert r.returncode == 0 and r.stdout.count("added") == 2, r.stdout + r.stderr
    assert sorted(ln.split()[0] for ln in fresh.read_text().splitlines()) == sorted(nodes.ips.values())
    r = run_cli(["ssh", "check", "--nodes", toml], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr

    fresh.write_text("")
    r = run_cli(["ssh", "check", "--nodes", toml], timeout=120)
    assert r.returncode == 1 and r.stdout.count("FAIL") == 2 and "is unknown" in r.stdout, r.stdout


def _with_known_hosts(nodes, tmp_path, known) -> str:
    p = tmp_path / f"nodes-{known.name}.toml"
    p.write_text(nodes.nodes_toml.read_text().replace(str(nodes.known_hosts), str(known)))
    return str(p)
