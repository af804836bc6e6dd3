"""``lossy-link`` (issue 29 item 4) in pure logic: the iptables rule text, chain naming and counter parsing
(synthetic ``iptables -S -v`` output), the link probe against a local TCP peer that resets, goes silent or
closes after some bytes (no Kafka: a socket of this test), each target's judgement from synthetic evidence,
and the fault against the stand-in backend (drop, skipped without iptables, healed on every path).
Nothing here runs iptables or says anything about Kafka."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from onceproof.backends.common import iptables
from onceproof.nemesis import catalog, lossy, packages
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext
from onceproof.nemesis.lossy import LossyLink, judge, link_probe
from tests.stand_in_backend import StandInCluster, StandInNetwork

# ---------------------------------------------------------------------------------------- iptables text


def test_the_chain_is_named_after_the_run_and_fits_iptables():
    a, b = iptables.chain_name("/tmp/r/run-1"), iptables.chain_name("/tmp/r/run-2")
    assert a == iptables.chain_name("/tmp/r/run-1") and a != b
    assert a.startswith("OP-") and len(a) == 11 and len(a) <= 28


def test_rules_count_then_drop_each_port_at_random():
    chain = iptables.chain_name("/x")
    r = iptables.rules(chain, [19091, 19191], 0.1)
    assert r == [["-A", chain, "-p", "tcp", "--dport", "19091"],
                 ["-A", chain, "-p", "tcp", "--dport", "19091", "-m", "statistic", "--mode", "random",
                  "--probability", "0.1", "-j", "DROP"],
                 ["-A", chain, "-p", "tcp", "--dport", "19191"],
                 ["-A", chain, "-p", "tcp", "--dport", "19191", "-m", "statistic", "--mode", "random",
                  "--probability", "0.1", "-j", "DROP"]]
    assert iptables.jump_rule(chain) == ["INPUT", "-i", "lo", "-p", "tcp", "-j", chain]


@pytest.mark.parametrize("chain,ports,p,says", [
    ("OP-12345678", [1], 0.0, "(0, 1)"), ("OP-12345678", [1], 1.0, "(0, 1)"), ("OP-12345678", [0], 0.1, "1..65535"),
    ("OP-12345678", [], 0.1, "1..65535"), ("DOCKER", [1], 0.1, "chain_name"), ("OP-x y", [1], 0.1, "chain_name")])
def test_bad_rule_input_names_the_fix(chain, ports, p, says):
    with pytest.raises(ValueError, match=r".*" + says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        iptables.rules(chain, ports, p)


SHOWN = """-N OP-1a2b3c4d
-A OP-1a2b3c4d -p tcp -m tcp --dport 19091 -c 812 60340
-A OP-1a2b3c4d -p tcp -m tcp --dport 19091 -m statistic --mode random --probability 0.10000000009 -c 77 5120 -j DROP
-A OP-1a2b3c4d -p tcp -m tcp --dport 19191 -c 188 24000
-A OP-1a2b3c4d -p tcp -m tcp --dport 19191 -m statistic --mode random --probability 0.10000000009 -c 20 1300 -j DROP
"""


def test_counters_are_read_from_the_rules():
    rows = iptables.parse_counters(SHOWN)
    assert [r["packets"] for r in rows] == [812, 77, 188, 20] and [r["drop"] for r in rows] == [False, True] * 2
    assert rows[1]["bytes"] == 5120 and "statistic" in rows[1]["rule"] and "-c " not in rows[1]["rule"]
    assert iptables.summarize(rows) == {"seen": 1000, "dropped": 97}
    assert iptables.parse_counters("-N OP-1a2b3c4d\n") == [] and iptables.summarize([]) == {"seen": 0, "dropped": 0}


HOOK = """-P INPUT ACCEPT
-A INPUT -i lo -p tcp -j OP-1a2b3c4d
-A INPUT -i lo -p tcp -j OP-99999999
-A INPUT -i lo -p tcp -j OP-1a2b3c4d
-A INPUT -s 10.0.0.0/8 -j ACCEPT
"""


def test_only_our_jumps_are_removed_and_only_our_chains_are_leftovers():
    assert iptables.jumps_to("OP-1a2b3c4d", HOOK) == [["-D", "INPUT", "-i", "lo", "-p", "tcp", "-j", "OP-1a2b3c4d"]] * 2
    assert iptables.leftovers("-N DOCKER\n-N OP-1a2b3c4d\n-N OP-99999999\n-A OP-99999999 -j DROP\n") == [
        "OP-1a2b3c4d", "OP-99999999"]
    assert iptables.remove("DOCKER") and iptables.remove("INPUT")  # refused, never run


def test_the_reaper_removes_only_noted_chains_of_ours(tmp_path, monkeypatch):
    """The reaper's call: the chains noted in the run directory, never a name without the prefix."""
    ran = []

    class Done:
        def __init__(self, rc=0, out=""):
            self.returncode, self.stdout, self.stderr = rc, out, ""

    def run(args, check=True):
        ran.append(args)
        if args == ["-S", "INPUT"]:
            return Done(out=HOOK)
        return Done()

    monkeypatch.setattr(iptables, "_run", run)
    monkeypatch.setattr(iptables, "_binary", lambda: "/usr/sbin/iptables")
    iptables.note_chain("OP-1a2b3c4d", str(tmp_path))
    (tmp_path / iptables.NOTE).open("a").write("DOCKER-USER\nOP-1a2b3c4d\n")
    assert iptables.remove_noted(str(tmp_path)) == ["OP-1a2b3c4d"]
    assert ["-D", "INPUT", "-i", "lo", "-p", "tcp", "-j", "OP-1a2b3c4d"] in ran
    assert ["-F", "OP-1a2b3c4d"] in ran and ["-X", "OP-1a2b3c4d"] in ran
    assert not any("DOCKER-USER" in a for a in ran)
    assert iptables.remove_noted(str(tmp_path / "nowhere")) == []


# ----------------------------------------------------------------------------------------- link probe


def test_api_versions_request_is_a_sized_kafka_request():
    b = lossy.api_versions_request(7, "c")
    size, key, version, corr, n = struct.unpack(">ihhih", b[:14])
    assert size == len(b) - 4 and (key, version, corr, n) == (18, 0, 7, 1) and b[14:] == b"c"


def _peer(behaviour: str, answer: int = 300, close_after: int = 0):
    """A local TCP peer (not Kafka): answers each request with ``answer`` bytes; ``reset`` sends an RST
    after the first request, ``silent`` reads and never answers, closing after 0.3 s, ``limit`` closes once
    ``close_after`` bytes were sent."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        sent, t0 = 0, time.monotonic()
        with c:
            c.settimeout(0.3)
            while True:
                try:
                    data = c.recv(65536)
                except TimeoutError:
                    if behaviour == "silent":
                        return
                    continue
                if not data:
                    return
                if behaviour == "reset":
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if behaviour == "silent":
                    if time.monotonic() - t0 > 0.3:
                        return
                    continue
                n = answer * max(1, len(data) // 31)
                if behaviour == "limit" and sent + n > close_after:
                    c.sendall(b"x" * (close_after - sent))
                    return
                c.sendall(b"x" * n)
                sent += n

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", srv


@pytest.mark.parametrize("behaviour,ended", [("reset", "reset"), ("silent", "closed"), ("limit", "closed"),
                                             ("open", "open")])
def test_the_link_probe_tells_how_a_connection_ended(behaviour, ended):
    address, srv = _peer(behaviour, close_after=20_000)
    with srv:
        got = link_probe(address, max_s=1.0, interval_s=0.01, batch=10, until_bytes=50_000)
    assert got["ended"] == ended, got
    if behaviour == "silent":
        assert got["bytes"] == 0 and got["requests"] >= 1
    if behaviour == "limit":
        assert got["bytes"] == 20_000
    srv2 = socket.socket()
    srv2.bind(("127.0.0.1", 0))
    port = srv2.getsockname()[1]
    srv2.close()
    assert link_probe(f"127.0.0.1:{port}", max_s=0.2)["ended"] == "refused"


# ------------------------------------------------------------------------------------------ judgement

ACTIVE = {"client-2": [lossy.NAME], "internal-2": [lossy.NAME]}


@pytest.mark.parametrize("variant,links,effective", [
    ("reset-peer", [{"ended": "open", "bytes": 900}, {"ended": "reset", "bytes": 300}], True),
    ("reset-peer", [{"ended": "open", "bytes": 900}] * 8, False),
    ("timeout", [{"ended": "closed", "bytes": 0}], True),
    ("timeout", [{"ended": "closed", "bytes": 310}], False),  # an answer came through: the link did not stop
    ("limit-data", [{"ended": "closed", "bytes": lossy.LIMIT_BYTES}], True),
    ("limit-data", [{"ended": "open", "bytes": lossy.LIMIT_BYTES + 1}], False),
])
def test_each_target_is_judged_by_what_the_link_did(variant, links, effective):
    assert judge(variant, {"active": ACTIVE, "link_probes": links}) is effective
    assert judge(variant, {"active": {"client-2": [], "internal-2": [lossy.NAME]}, "link_probes": links}) is False


def test_drop_is_judged_by_the_packets_dropped():
    assert judge("drop", {"counters_during": {"seen": 1000, "dropped": 97}})
    assert not judge("drop", {"counters_during": {"seen": 1000, "dropped": 0}})
    assert not judge("drop", {"counters_during": {}})
    with pytest.raises(ValueError, match="choose from reset-peer"):
        judge("duplicate", {})


# ---------------------------------------------------------------------------- the fault on stand-ins


def _ctx(tmp_path, net=None, hold_s=0.01) -> NemesisContext:
    return NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path / "ckpt", cluster=StandInCluster(3),
                          network=net, hold_s=hold_s)


@pytest.fixture(autouse=True)
def no_kafka(monkeypatch):
    """The metadata probe and the netem probe stood in (no Kafka, no tc here)."""
    monkeypatch.setattr(lossy, "probe", lambda address, timeout_s=3.0: {"ok": True, "ms": 1.0})
    monkeypatch.setattr(lossy.netem, "unavailable", lambda: "stand-in: no netem")
    monkeypatch.setattr(lossy.targets, "partition_leaders", lambda bootstrap, topic: {})


def test_drop_installs_counts_and_removes_the_loss(tmp_path):
    net = StandInNetwork([1, 2, 3])
    out = LossyLink("drop").invoke(_ctx(tmp_path, net), random.Random(1))
    assert out.outcome == EFFECTIVE, out.evidence
    n = out.evidence["node"]
    assert net.calls == [("drop", n, lossy.DROP_PROBABILITY), ("undrop",)] and net.loss == {}
    assert out.evidence["loss_ratio"] == 0.1 and out.evidence["netem"] == "stand-in: no netem"


def test_drop_aims_at_a_broker_that_leads_an_output_partition(tmp_path, monkeypatch):
    """Broker 2 was killed and came back leading nothing: the loss goes to 3, which leads the output's
    partitions; with no leader known, to the broker drawn at random."""
    monkeypatch.setattr(lossy.targets, "partition_leaders", lambda bootstrap, topic: {0: 3, 1: 3, 2: 1})
    net = StandInNetwork([1, 2, 3])
    out = LossyLink("drop").invoke(_ctx(tmp_path, net), random.Random(7))
    assert out.evidence["node"] in (1, 3) and out.evidence["aim"]["target"] == "leader", out.evidence
    assert out.evidence["aim"]["topic"] == "output" and net.calls[0][1] == out.evidence["node"]

    def unknown(bootstrap, topic):
        raise RuntimeError("broker transport failure")

    monkeypatch.setattr(lossy.targets, "partition_leaders", unknown)
    out = LossyLink("drop").invoke(_ctx(tmp_path, StandInNetwork([1, 2, 3])), random.Random(7))
    assert out.evidence["aim"]["target"] == "random" and "transport failure" in out.evidence["aim"]["reason"]


def test_drop_is_skipped_with_the_reason_when_iptables_cannot(tmp_path):
    net = StandInNetwork([1, 2, 3])
    net.no_loss = "iptables needs root (this harness runs as uid 1000)"
    out = LossyLink("drop").invoke(_ctx(tmp_path, net), random.Random(1))
    assert out.outcome == SKIPPED and "uid 1000" in out.evidence["reason"] and net.calls == []
    assert LossyLink("drop").invoke(_ctx(tmp_path, None), random.Random(1)).outcome == SKIPPED


def test_drop_is_undone_when_the_hold_fails(tmp_path, monkeypatch):
    net = StandInNetwork([1, 2, 3])
    monkeypatch.setattr(lossy, "hold", lambda ctx, s: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        LossyLink("drop").invoke(_ctx(tmp_path, net), random.Random(1))
    assert net.calls[-1] == ("undrop",) and net.loss == {}


def test_a_toxic_turn_adds_and_removes_the_toxic_with_its_toxicity(tmp_path, monkeypatch):
    net = StandInNetwork([1, 2, 3])
    monkeypatch.setattr(lossy, "_link_probes", lambda variant, address: [{"ended": "reset", "bytes": 0}])
    out = LossyLink("reset-peer").invoke(_ctx(tmp_path, net), random.Random(1))
    assert out.outcome == EFFECTIVE, out.evidence
    slows = [c for c in net.calls if c[0] == "slow"]
    assert [c[2] for c in slows] == ["reset_peer"] * 2 and all(c[4] == lossy.RESET_TOXICITY for c in slows)
    assert net.slowdowns(slows[0][1]) == [] and [c[0] for c in net.calls].count("unslow") == 2
    monkeypatch.setattr(lossy, "_link_probes", lambda variant, address: [{"ended": "open", "bytes": 900}])
    assert LossyLink("timeout").invoke(_ctx(tmp_path, net), random.Random(1)).outcome == NOT_EFFECTIVE


def test_heal_removes_every_loss(tmp_path):
    net = StandInNetwork([1, 2, 3])
    net.drop(1, 0.1)
    LossyLink().heal(_ctx(tmp_path, net))
    assert net.loss == {} and ("heal",) in net.calls
    LossyLink().heal(_ctx(tmp_path, None))  # no network: nothing to do, no error


def test_the_target_is_seeded(tmp_path):
    """Without a target, the op's RNG draws one; the same key, the same target and broker."""
    assert LossyLink.target_choices == ("reset-peer", "timeout", "limit-data", "drop")
    net = StandInNetwork([1, 2, 3])
    aim = [lossy._aim(_ctx(tmp_path, net), random.Random(k), None, LossyLink.target_choices) for k in ("a", "a", "b")]
    assert aim[0] == aim[1]


# ---------------------------------------------------------------------------------------- registration


def test_lossy_link_is_registered_outside_all_in_its_own_package():
    assert catalog.parse("lossy-link:drop") == ["lossy-link:drop"] and catalog.needs_proxy(["lossy-link:drop"])
    assert catalog.expand("lossy-link") == [f"lossy-link:{t}" for t in LossyLink.target_choices]
    assert not any(s.startswith("lossy-link") for s in catalog.all_specs())
    assert packages.specs("lossy") == catalog.expand("lossy-link")
    assert set(packages.specs("lossy")) <= set(packages.specs("all"))
    assert catalog.expected_s("lossy-link:timeout", hold_s=6.0) == 16.0
    with pytest.raises(ValueError, match="choose from: reset-peer, timeout, limit-data, drop"):
        catalog.parse("lossy-link:duplicate")
