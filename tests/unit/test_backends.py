"""The backend seams (issue 8): a fault the chosen backend cannot perform is refused before anything
starts, and the nemeses reach a backend only through its protocols (``backends/base.py``).

Pure logic: the faults run against a stand-in backend (``tests/stand_in_backend.py``, synthetic process
states, no process, no socket). Kafka's own answers (is a broker registered, does a probe get metadata)
are stood in for by reading that synthetic state. Nothing here says anything about Kafka or Spark.
"""

from __future__ import annotations

import ast
import dataclasses
import random
from pathlib import Path

import pytest

from onceproof.backends import base, capabilities, registry
from onceproof.backends.base import GONE, STOPPED, can_perform
from onceproof.backends.docker.backend import DockerBackend
from onceproof.backends.docker.spark import DockerSpark
from onceproof.backends.local.backend import LocalBackend
from onceproof.backends.local.kafka import KafkaCluster
from onceproof.backends.local.spark import LocalSpark
from onceproof.harness import cli
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.nemesis import broker, catalog, network
from onceproof.nemesis.broker import KillBroker, PauseBroker
from onceproof.nemesis.fault import EFFECTIVE, SKIPPED, NemesisContext
from onceproof.nemesis.kill_driver import KillDriver
from onceproof.nemesis.network import Partition, SlowNetwork
from tests.conftest import SRC
from tests.stand_in_backend import NoNetworkStandIn, StandInBackend, StandInCluster, StandInNetwork, StandInSpark


@pytest.fixture(autouse=True)
def stand_ins(monkeypatch):
    """Registers ``stand-in`` (every optional protocol) and ``no-network`` (no fault network, no driver
    freeze)."""
    monkeypatch.setitem(registry.BACKENDS, "stand-in", "tests.stand_in_backend:StandInBackend")
    monkeypatch.setitem(registry.BACKENDS, "no-network", "tests.stand_in_backend:NoNetworkStandIn")
    monkeypatch.setattr(registry, "_made", {})


@pytest.fixture
def kills_by_count(monkeypatch):
    """Needs per target: as if killing the partition leader or the transaction coordinator needed the
    fault network, so a backend without one kills brokers only by count (``one``, ``minority``)."""
    needs = {k: v for k, v in capabilities.NEEDS.items() if k != "kill-broker:*"}
    needs |= {"kill-broker:one": (), "kill-broker:minority": (),
              "kill-broker:leader": (base.NetworkFaults,), "kill-broker:txn-coordinator": (base.NetworkFaults,)}
    monkeypatch.setattr(capabilities, "NEEDS", needs)


# ------------------------------------------------------------------------------------ capabilities


@pytest.mark.usefixtures("kills_by_count")
@pytest.mark.parametrize("spec,missing", [
    ("partition:client", ["partition:client"]),
    ("slow-network", ["slow-network:latency"]),
    ("kill-broker", ["kill-broker:leader", "kill-broker:txn-coordinator"]),
    ("kill-driver-in-commit-window", ["kill-driver-in-commit-window"]),
])
def test_a_fault_the_backend_cannot_perform_is_refused_before_anything_starts(spec, missing, tmp_path, capsys):
    results = tmp_path / "results"
    code = cli.main(["run", "--backend", "no-network", "--nemesis", f"kill-driver,{spec}", "--results",
                     str(results)])
    err = capsys.readouterr().err.strip()
    assert code == 254, err
    assert "\n" not in err and "--nemesis" in err and "no-network backend" in err and spec in err, err
    for m in missing:
        assert m in err, err
    assert not results.exists(), "a run directory was created for a refused run"
    assert registry.get("no-network").built == [], "the backend built something for a refused run"


def test_what_the_backend_can_perform_passes_and_a_bare_fault_needs_every_target(kills_by_count):
    assert registry.get("no-network").capabilities == {"kill-executor", "kill-driver", "kill-broker:one",
                                                       "kill-broker:minority", "pause-broker:*", "commit-delay:*",
                                                       "restart-mid-txn", "bounce-broker:*", "rolling-restart",
                                                       "elect-leaders", "reassign-partitions:*",
                                                       "add-input-partitions", "delete-input-records"}
    TestConfig(backend="no-network", nemesis=["kill-broker:one", "kill-broker:minority", "pause-broker",
                                              "kill-executor"], time_limit=300).validate()
    with pytest.raises(ConfigError) as e:
        TestConfig(backend="no-network", nemesis=["kill-broker"], time_limit=300).validate()
    assert e.value.option == "--nemesis" and "kill-broker:leader" in e.value.message
    assert "kill-broker:one" not in e.value.message.split(";")[0]


LOCAL = frozenset({"kill-executor", "kill-driver", "kill-driver-in-commit-window", "kill-broker:*", "pause-broker:*",
                   "commit-delay:*", "partition:*", "slow-network:*", "zombie-task:*", "upgrade:*",
                   "restart-mid-txn", "bounce-broker:*", "rolling-restart", "rolling-upgrade", "elect-leaders",
                   "reassign-partitions:*", "lossy-link:reset-peer", "lossy-link:timeout", "lossy-link:limit-data",
                   "lossy-link:drop",
                   "add-input-partitions",
                   "clock-skew:*", "driver-clock-skew:*", "corrupt-segment-tail:*", "disk-full:*",
                   "lose-unsynced-writes:*", "delay-txn-requests:*", "delete-input-records", "lose-checkpoint"})


def test_the_local_backend_performs_every_fault_and_target():
    local = registry.get("local")
    assert local.capabilities == capabilities.derive(LocalBackend) == LOCAL
    assert [s for s in catalog.all_specs() if not can_perform(local.capabilities, s)] == []
    for n in catalog.FAULTS:  # the targeted faults too
        assert all(can_perform(local.capabilities, s) for s in catalog.expand(n)), n


def test_capabilities_follow_the_protocols_a_backend_implements():
    """Each optional protocol adds exactly the faults that need it; none is listed by hand."""
    assert isinstance(LocalBackend(), base.NetworkFaults) and not isinstance(NoNetworkStandIn(), base.NetworkFaults)
    assert capabilities.spark_class(LocalBackend) is LocalSpark
    # clock faults follow the Cluster class: the local KafkaCluster has clocks, the Docker one does not
    assert capabilities.cluster_class(LocalBackend) is KafkaCluster and issubclass(KafkaCluster, base.ClockFaults)
    assert not issubclass(capabilities.cluster_class(DockerBackend), base.ClockFaults)
    assert "clock-skew:*" not in capabilities.derive(DockerBackend)
    assert "clock-skew:*" not in NoNetworkStandIn().capabilities
    # disk faults too: the Docker cluster reaches its bind-mounted log directories but has no small disks
    assert issubclass(KafkaCluster, base.LogDirs) and issubclass(KafkaCluster, base.DiskFaults)
    docker_cluster = capabilities.cluster_class(DockerBackend)
    assert issubclass(docker_cluster, base.LogDirs) and not issubclass(docker_cluster, base.DiskFaults)
    assert "corrupt-segment-tail:*" in capabilities.derive(DockerBackend)
    assert "disk-full:*" not in capabilities.derive(DockerBackend)
    assert "lose-unsynced-writes:*" not in capabilities.derive(DockerBackend)
    assert not {"corrupt-segment-tail:*", "disk-full:*"} & NoNetworkStandIn().capabilities
    for proto in (base.DriverPause, base.ExecutorFaults, base.TaskKill, base.Runtimes, base.DriverClock):
        assert issubclass(LocalSpark, proto) and issubclass(StandInSpark, proto), proto
    assert issubclass(DockerSpark, base.DriverPause) and issubclass(DockerSpark, base.ExecutorFaults)
    # freezing executors sharpens kill-executor's aim and adds no fault: a backend without it keeps them all
    assert issubclass(LocalSpark, base.ExecutorPause) and issubclass(DockerSpark, base.ExecutorPause)
    assert issubclass(StandInSpark, base.ExecutorPause)
    assert not any(base.ExecutorPause in needs for needs in capabilities.NEEDS.values())
    assert not issubclass(DockerSpark, base.TaskKill) and not issubclass(DockerSpark, base.Runtimes)
    assert StandInBackend().capabilities == LOCAL
    core = {s for s, needs in capabilities.NEEDS.items() if not needs}
    assert core == {"kill-driver", "kill-broker:*", "pause-broker:*", "commit-delay:*", "restart-mid-txn",
                    "bounce-broker:*", "rolling-restart", "elect-leaders", "reassign-partitions:*",
                    "add-input-partitions", "delete-input-records"}
    assert issubclass(LocalSpark, base.CheckpointLoss) and not issubclass(DockerSpark, base.CheckpointLoss)
    assert NoNetworkStandIn().capabilities == core | {"kill-executor"}
    for spec in capabilities.NEEDS:  # every spec names a fault (and a target) that exists
        name, _, target = spec.partition(":")
        assert name in catalog.FAULTS and (target in ("", "*") or target in catalog.target_choices()[name]), spec
        assert bool(target) == bool(catalog.target_choices().get(name)), spec


def test_an_unknown_backend_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["run", "--backend", "nope", "--results", str(tmp_path / "r")]) == 254
    assert "--backend" in capsys.readouterr().err and not (tmp_path / "r").exists()
    assert cli.main(["cluster", "up", "--backend", "nope", "--dir", str(tmp_path / "c")]) == 254
    err = capsys.readouterr().err
    assert "--backend" in err and "local" in err and not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- protocol conformance


def _members(proto: type) -> set[str]:
    return {n for n in vars(proto) if not n.startswith("_")} | set(getattr(proto, "__annotations__", {}))


@pytest.mark.parametrize("proto,impl", [
    ("Cluster", "onceproof.backends.local.kafka:KafkaCluster"),
    ("SparkApp", "onceproof.backends.local.spark:LocalSpark"),
    ("SparkApp", "onceproof.backends.docker.spark:DockerSpark"),
    ("ExecutorPause", "onceproof.backends.local.spark:LocalSpark"),
    ("ExecutorPause", "onceproof.backends.docker.spark:DockerSpark"),
    ("ExecutorPause", "tests.stand_in_backend:StandInSpark"),
    ("FaultNetwork", "onceproof.backends.local.faultproxy:ProxyNetwork"),
    ("FaultNetwork", "onceproof.backends.docker.network:DockerFaultNetwork"),
    ("Backend", "onceproof.backends.local.backend:LocalBackend"),
    ("NetworkFaults", "onceproof.backends.local.backend:LocalBackend"),
    ("Prepare", "onceproof.backends.local.backend:LocalBackend"),
    ("Backend", "onceproof.backends.docker.backend:DockerBackend"),
    ("NetworkFaults", "onceproof.backends.docker.backend:DockerBackend"),
    ("Prepare", "onceproof.backends.docker.backend:DockerBackend"),
    ("Cluster", "tests.stand_in_backend:StandInCluster"),
    ("ClockFaults", "onceproof.backends.local.kafka:KafkaCluster"),
    ("ClockFaults", "tests.stand_in_backend:ClockStandInCluster"),
    ("LogDirs", "onceproof.backends.local.kafka:KafkaCluster"),
    ("LogDirs", "onceproof.backends.docker.cluster:DockerKafkaCluster"),
    ("LogDirs", "tests.stand_in_backend:DiskStandInCluster"),
    ("DiskFaults", "onceproof.backends.local.kafka:KafkaCluster"),
    ("DiskFaults", "tests.stand_in_backend:DiskStandInCluster"),
    ("SparkApp", "tests.stand_in_backend:StandInSpark"),
    ("SparkApp", "tests.stand_in_backend:CoreStandInSpark"),
    ("FaultNetwork", "tests.stand_in_backend:StandInNetwork"),
    ("Backend", "tests.stand_in_backend:StandInBackend"),
    ("Backend", "tests.stand_in_backend:NoNetworkStandIn"),
])
def test_each_implementation_has_every_protocol_member(proto, impl):
    import importlib

    module, _, name = impl.partition(":")
    cls = getattr(importlib.import_module(module), name)
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    missing = [m for m in _members(getattr(base, proto)) if not hasattr(cls, m) and m not in fields]
    assert not missing, f"{impl} lacks {missing} of {proto}"


def test_the_pipeline_arguments_are_the_jobs_own_options(tmp_path):
    from onceproof import job

    p = base.PipelineArgs(bootstrap="h:1", sink="eos", checkpoint=tmp_path / "ck", control=tmp_path / "ctl",
                          sink_log=tmp_path / "sink.jsonl", input_topic="in", output_topic="out",
                          progress_topic="prog", sink_id="s", trigger_ms=250, max_offsets=77,
                          txn_timeout_ms=12000, pool_size=6, master="local[2]")
    ns = vars(job.parse_args(p.argv()))
    want = {**{f.name: getattr(p, f.name) for f in dataclasses.fields(p)}, "control_dir": str(p.control)}
    want.pop("control")
    for k in ("command", "cwd", "python", "output_values"):  # a user's pipeline's, not the bundled job's options
        want.pop(k)
    for k in ("runtime", "jars", "clock_file"):  # where and how the backend runs the job, what it puts on spark.jars
        want.pop(k)
    assert want.pop("file_sink") is None and ns["file_sink_path"] == ""
    p = dataclasses.replace(p, file_sink=tmp_path / "fs", workload="counter")
    ns2 = vars(job.parse_args(p.argv()))
    assert (ns2["file_sink_path"], ns2["workload"]) == (str(tmp_path / "fs"), "counter")
    for k, v in want.items():
        assert ns[k] == (str(v) if isinstance(v, Path) else v), k


# ---------------------------------------------------------------- nemeses speak only the protocols


def _ctx(tmp_path, cluster=None, network_=None, spark=None, hold_s=0.01) -> NemesisContext:
    return NemesisContext(spark=spark, control=tmp_path, checkpoint=tmp_path, cluster=cluster, hold_s=hold_s,
                          network=network_)


@pytest.fixture
def registered(monkeypatch):
    """Kafka's metadata stood in for: a node is registered while its synthetic process is alive."""
    def use(cluster: StandInCluster):
        monkeypatch.setattr(broker, "_registered", lambda bootstrap, node: cluster.state(node).alive)
    return use


def test_kill_broker_kills_through_the_cluster_and_restarts_it(tmp_path, registered):
    c = StandInCluster(3)
    registered(c)
    before = {n: c.state(n).pid for n in c.nodes}
    out = KillBroker("one").invoke(_ctx(tmp_path, c), random.Random(5))
    assert out.outcome == EFFECTIVE, out.evidence
    (n,) = out.evidence["nodes"]
    assert out.evidence["killed"] == {n: {"pid": before[n], "status_after": GONE}}
    assert out.evidence["rejoined_after_s"][n] is not None
    assert c.calls == [("kill", n), ("start", n)]
    assert c.state(n).alive and c.state(n).pid != before[n]


def test_a_restart_counts_the_poll_that_saw_the_broker_registered(tmp_path, monkeypatch):
    """Each metadata request may be answered by another broker: one that has not replayed the registration
    yet must not undo the poll that saw it."""
    c = StandInCluster(3)
    answers = iter([False, True, False, False])  # seen on the second poll, then a lagging broker answers
    polls = []

    def registered_(bootstrap, node):
        polls.append(node)
        return next(answers)
    monkeypatch.setattr(broker, "_registered", registered_)
    out = broker.restart(_ctx(tmp_path, c), [2], timeout_s=30.0)
    assert out[2] is not None and polls == [2, 2]


def test_kill_broker_never_takes_the_majority(tmp_path, registered):
    c = StandInCluster(3)
    registered(c)
    c.kill(1)
    c.calls.clear()
    out = KillBroker("one").invoke(_ctx(tmp_path, c), random.Random(5))
    assert out.outcome == SKIPPED and out.evidence["reason"] == "would leave no majority"
    assert out.evidence["live"] == [2, 3] and c.calls == []


def test_kill_broker_heal_restarts_the_dead_unless_the_run_is_tearing_down(tmp_path, registered):
    c = StandInCluster(3)
    registered(c)
    c.kill(2)
    ctx = _ctx(tmp_path, c)
    ctx.teardown.set()
    KillBroker().heal(ctx)
    assert not c.state(2).alive
    ctx.teardown.clear()
    KillBroker().heal(ctx)
    assert c.state(2).alive and c.calls[-1] == ("start", 2)


def test_pause_broker_pauses_and_resumes_through_the_cluster(tmp_path):
    c = StandInCluster(3)
    out = PauseBroker("one").invoke(_ctx(tmp_path, c), random.Random(2))
    assert out.outcome == EFFECTIVE, out.evidence
    (n,) = out.evidence["nodes"]
    assert out.evidence["paused"][n] == {"pid": c.state(n).pid, "status_paused": STOPPED,
                                         "status_resumed": "sleeping"}
    assert c.calls == [("pause", n), ("resume", n)]
    c.pause(1)
    PauseBroker().heal(_ctx(tmp_path, c))
    assert not any(c.state(m).paused for m in c.nodes)


def test_a_pause_that_does_not_take_is_not_effective(tmp_path, monkeypatch):
    c = StandInCluster(3)
    monkeypatch.setattr(StandInCluster, "pause", lambda self, node: None)  # the backend ignores the signal
    out = PauseBroker("one").invoke(_ctx(tmp_path, c), random.Random(2))
    assert out.outcome != EFFECTIVE


@pytest.fixture
def probe_through(monkeypatch):
    """A probe succeeds unless the client path of its node is cut (stands in for a metadata request)."""
    def use(net: StandInNetwork):
        def probe(address: str, timeout_s: float = 3.0) -> dict:
            node = int(address.split("-")[-1].split(":")[0])
            return {"ok": f"client-{node}" not in net.cut_paths(), "ms": 1.0}
        monkeypatch.setattr(network, "probe", probe)
    return use


def test_partition_cuts_and_restores_paths_through_the_network(tmp_path, probe_through):
    c, net = StandInCluster(3), StandInNetwork([1, 2, 3])
    probe_through(net)
    out = Partition("client", min_hold_s=0.01).invoke(_ctx(tmp_path, c, net), random.Random(3))
    assert out.outcome == EFFECTIVE, out.evidence
    n = out.evidence["node"]
    assert out.evidence["paths"] == out.evidence["disabled"] == [f"client-{n}"]
    assert not out.evidence["probe_during"]["ok"] and out.evidence["probe_after"]["ok"]
    assert net.calls == [("cut", (f"client-{n}",)), ("restore", (f"client-{n}",))] and net.cut_paths() == []


def test_slow_network_slows_and_unslows_through_the_network(tmp_path, probe_through):
    c, net = StandInCluster(3), StandInNetwork([1, 2, 3])
    probe_through(net)
    out = SlowNetwork("bandwidth").invoke(_ctx(tmp_path, c, net), random.Random(3))
    assert out.outcome == EFFECTIVE, out.evidence
    assert all(v == ["nemesis-bandwidth"] for v in out.evidence["active"].values())
    assert [k[0] for k in net.calls] == ["slow", "slow", "unslow", "unslow"]
    assert all(k[3] == "downstream" for k in net.calls if k[0] == "slow")


def test_network_faults_skip_without_a_fault_network(tmp_path):
    out = Partition("client").invoke(_ctx(tmp_path, StandInCluster(3)), random.Random(3))
    assert out.outcome == SKIPPED


def test_kill_driver_kills_through_the_app_and_names_the_in_flight_batch(tmp_path):
    for d, n in (("offsets", 3), ("commits", 2)):
        (tmp_path / d).mkdir()
        (tmp_path / d / str(n)).write_text("v1\n")
    spark = StandInSpark(tmp_path, driver=4242)
    out = KillDriver().invoke(_ctx(tmp_path, spark=spark), random.Random(0))
    assert out.outcome == EFFECTIVE
    assert out.evidence.pop("killed_at") > 0
    assert out.evidence == {"pid": 4242, "latest_offsets": 3, "latest_commit": 2, "in_flight_batch": 3,
                            "driver_gone": True}
    assert spark.calls == [("kill_driver", 4242)]


def test_the_stand_in_refuses_what_is_not_protocol(tmp_path):
    c = StandInCluster(3)
    with pytest.raises(AssertionError, match="brokers"):
        c.brokers  # noqa: B018 - the access is the test
    with pytest.raises(AttributeError):
        c.spec = None


FORBIDDEN = ("psutil", "signal", "subprocess", "onceproof.backends.local")


@pytest.mark.parametrize("path", sorted((SRC / "nemesis").glob("*.py")), ids=lambda p: p.name)
def test_no_nemesis_reaches_past_the_protocols(path):
    """No process table, no signals, no local-backend module, no pid set by hand in ``nemesis/``, and of
    the context's services only their protocols' members."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            bad = [n for n in names if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)]
            assert not bad, f"{path.name}:{node.lineno} imports {bad}"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                assert not (isinstance(t, ast.Attribute) and t.attr == "pid"), f"{path.name}:{node.lineno} sets a pid"
        # ctx.cluster.<x>, ctx.spark.<x>, ctx.network.<x>: <x> must be a member of that protocol
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr in SERVICES:
            protos = SERVICES[node.value.attr]
            assert any(node.attr in _members(p) for p in protos), \
                f"{path.name}:{node.lineno} uses .{node.value.attr}.{node.attr}, not a member of " \
                + " or ".join(p.__name__ for p in protos)


# ctx.spark in a nemesis: the core or an optional protocol (the one its fault's capabilities.NEEDS names)
SERVICES = {"cluster": (base.Cluster,), "network": (base.FaultNetwork,),
            "spark": (base.SparkApp, base.DriverPause, base.ExecutorFaults, base.ExecutorPause, base.TaskKill,
                      base.Runtimes, base.DriverClock, base.CheckpointLoss)}


def test_the_fault_list_names_the_backends_that_can_perform_each_fault():
    from onceproof.harness.cli.catalog import backends_of

    real = ("local", "docker")  # this module's stand-in backends are registered too

    def of(name):
        return [b for b in backends_of(name) if b.partition(" ")[0] in real]

    assert of("kill-broker") == ["local", "docker"]
    assert of("zombie-task") == ["local"]  # the docker backend's Spark cannot kill one task
    assert of("add-input-partitions") == ["local", "docker"]


def test_the_toxics_table_matches_the_nemeses_and_a_network_with_kinds_narrows_the_targets():
    from onceproof.backends import capabilities
    from onceproof.backends.ssh.backend import SshBackend
    from onceproof.nemesis import lossy, network, stale_request
    mine = {f"slow-network:{t}": v[0] for t, v in network._TOXICS.items()}
    mine |= {f"lossy-link:{t}": v[0] for t, v in lossy.TOXICS.items()}
    mine |= {f"delay-txn-requests:{t}": "latency" for t in stale_request.DelayTxnRequests.target_choices}
    assert capabilities.TOXICS == mine
    ssh = capabilities.derive(SshBackend)
    assert "slow-network:bandwidth" in ssh and "partition:*" in ssh and "lossy-link:drop" in ssh
    assert not {"slow-network:*", "slow-network:latency", "slow-network:slicer", "lossy-link:reset-peer",
                "lossy-link:timeout", "lossy-link:limit-data", "zombie-task:*", "delay-txn-requests:*",
                "delay-txn-requests:endtxn"} & ssh  # tc shapes bandwidth only: no latency toxic
    assert "kill-executor" in ssh  # ExecutorFaults on the worker nodes (ssh/app.py), not TaskKill
    # libfaketime on the nodes (ssh/clock.py), a stopped broker's log directory through commands there, the
    # node helper's tmpfs and the lazyfs layer shipped to the nodes
    assert {"clock-skew:*", "driver-clock-skew:*", "corrupt-segment-tail:*", "disk-full:*",
            "lose-unsynced-writes:*"} <= ssh
    assert capabilities.network_kinds(LocalBackend) is None
    assert "slow-network:*" in capabilities.derive(LocalBackend)


def test_the_backends_that_need_a_file_are_made_from_it_and_refuse_without():
    from onceproof.backends.base import BackendError, ForeignCluster, RunResources
    from onceproof.backends.registry import BackendOptions
    examples = Path(__file__).resolve().parents[2] / "examples"
    with pytest.raises(BackendError, match="--backend ssh needs --nodes"):
        registry.get("ssh")
    with pytest.raises(BackendError, match="--backend external needs --cluster"):
        registry.get("external")
    with pytest.raises(BackendError, match="--backend local takes no --nodes"):
        registry.get("local", BackendOptions(nodes=examples / "nodes.toml"))
    with pytest.raises(BackendError, match="takes --cluster, not --nodes"):
        registry.get("external", BackendOptions(nodes=examples / "nodes.toml"))
    ssh = registry.get("ssh", BackendOptions(nodes=examples / "nodes.toml"))
    assert ssh is registry.get("ssh", BackendOptions(nodes=examples / "nodes.toml")) and ssh.hub is None
    assert isinstance(ssh, RunResources) and not isinstance(ssh, ForeignCluster)
    ext = registry.get("external", BackendOptions(cluster=examples / "cluster.toml"))
    assert isinstance(ext, ForeignCluster) and not isinstance(registry.get("local"), ForeignCluster)
    assert ext.security().protocol == "PLAINTEXT"
    assert capabilities.of_class(type(ext)) >= ext.capabilities
    assert "elect-leaders" in capabilities.derive(type(ext)) and "elect-leaders" not in capabilities.of_class(type(ext))


def test_a_broken_nodes_file_is_a_backend_error_naming_its_key(tmp_path):
    from onceproof.backends.base import BackendError
    from onceproof.backends.registry import BackendOptions
    bad = tmp_path / "nodes.toml"
    bad.write_text('node = [{ name = "n1", host = "h", roles = ["broker"] }]\n[ssh]\nuser = "op"\n')
    with pytest.raises(BackendError, match="ssh.known_hosts: required"):
        registry.get("ssh", BackendOptions(nodes=bad))
