"""The Docker backend's pure pieces (``backends/docker/``), on synthetic data: listeners and broker
environment, addresses, the proxies, the container-state mapping, the Spark containers' mounts and
command, the executor filter, the capabilities. No engine, container or process is touched."""

from __future__ import annotations

import ipaddress
import os
import stat
import subprocess
from pathlib import Path

import pytest

from onceproof.backends import base, capabilities, registry
from onceproof.backends.base import GONE, STOPPED, PipelineArgs, can_perform
from onceproof.backends.common.broker_config import server_properties
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.docker.backend import DockerBackend
from onceproof.backends.docker.cluster import node_state
from onceproof.backends.docker.driver import driver_command
from onceproof.backends.docker.layout import (
    APP_PORT,
    CLIENT_PORT,
    CONTROLLER_PORT,
    INTERNAL_PORT,
    DockerLayout,
    kafka_env_name,
    subnet_candidates,
)
from onceproof.backends.docker.network import DockerFaultNetwork, proxy_specs
from onceproof.backends.docker.spark import (
    DockerSpark,
    executors_in,
    pipeline_for_network,
    shared_dirs,
    spark_volumes,
)
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.nemesis import catalog

NETWORK_KEYS = {"node.id", "controller.quorum.voters", "listeners", "advertised.listeners",
                "listener.security.protocol.map", "log.dirs"}


def lay(proxied=False, nodes=3, base=19090, subnet="10.231.7.0/24"):
    return DockerLayout("0123abcdef", nodes, base, proxied=proxied, subnet=subnet)


def _decode(env_name: str) -> str:
    """The apache/kafka image's decoding (``KafkaDockerWrapper``), written out independently."""
    body = env_name[len("KAFKA_"):].lower()
    return body.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")


@pytest.mark.parametrize("prop", ["log.dirs", "transaction.state.log.min.isr", "a_b.c", "x-y.z_w"])
def test_env_names_decode_back_to_the_property(prop):
    assert _decode(kafka_env_name(prop)) == prop


@pytest.mark.parametrize("nodes", [1, 3, 5])
def test_brokers_get_the_local_backends_settings_and_only_the_network_keys_differ(nodes):
    local = dict(kv.split("=", 1) for kv in server_properties(
        ClusterSpec(Path("."), nodes=nodes), ClusterSpec(Path("."), nodes=nodes).node(1), Path("/x")).splitlines())
    env = lay(nodes=nodes).broker_env(1, "CID")
    props = {_decode(k): v for k, v in env.items() if k.startswith("KAFKA_")}
    assert env["CLUSTER_ID"] == "CID"
    for k, v in local.items():
        if k not in NETWORK_KEYS:
            assert props[k] == v, k
    if nodes == 3:
        assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
        assert (props["transaction.state.log.replication.factor"], props["transaction.state.log.min.isr"]) == ("3", "2")
        assert props["unclean.leader.election.enable"] == "false"


@pytest.mark.parametrize("proxied", [False, True])
def test_listeners_bind_every_port_and_advertise_one_address_per_kind_of_client(proxied):
    lo = lay(proxied)
    for n in (1, 2, 3):
        p = lo.server_properties(n)
        assert p["listeners"] == (f"CLIENT://0.0.0.0:{CLIENT_PORT},INTERNAL://0.0.0.0:{INTERNAL_PORT},"
                                  f"APP://0.0.0.0:{APP_PORT},CONTROLLER://0.0.0.0:{CONTROLLER_PORT}")
        adv = dict(x.split("://") for x in p["advertised.listeners"].split(","))
        assert set(adv) == {"CLIENT", "INTERNAL", "APP"}  # a controller is found through the voters
        assert adv["CLIENT"].startswith("127.0.0.1:"), "host clients must only be offered loopback"
        if proxied:
            assert adv["INTERNAL"] == f"toxiproxy:{9100 + n}" and adv["APP"] == f"toxiproxy:{9200 + n}"
            assert adv["CLIENT"] == f"127.0.0.1:{19090 + 50 + n}"
        else:
            assert adv["INTERNAL"] == f"kafka{n}:9092" and adv["APP"] == f"kafka{n}:9094"
            assert adv["CLIENT"] == f"127.0.0.1:{19090 + n}"
        assert p["controller.quorum.voters"] == "1@kafka1:9093,2@kafka2:9093,3@kafka3:9093"
        assert p["inter.broker.listener.name"] == "INTERNAL"
        assert set(p["listener.security.protocol.map"].replace(":PLAINTEXT", "").split(",")) == \
            {"CLIENT", "INTERNAL", "APP", "CONTROLLER"}
    assert lo.listen_ports() == {CLIENT_PORT, INTERNAL_PORT, APP_PORT, CONTROLLER_PORT}


@pytest.mark.parametrize("proxied", [False, True])
def test_every_host_port_is_inside_the_ports_lease(proxied):
    lo = lay(proxied)
    leased = set(ClusterSpec(Path("."), 3, lo.base_port, proxied=proxied).ports())
    host = {int(a.rpartition(":")[2]) for a in lo.bootstrap.split(",")} | {lo.client_host_port(n) for n in (1, 2, 3)}
    assert host <= leased


def test_fixed_addresses_are_distinct_inside_the_subnet_and_outside_the_dynamic_range():
    lo = lay(nodes=9)
    net, dyn = ipaddress.ip_network(lo.subnet), ipaddress.ip_network(lo.ip_range)
    fixed = [lo.gateway, lo.proxy_ip, lo.database_ip, lo.master_ip, *(lo.worker_ip(k) for k in (1, 2)),
             *(lo.broker_ip(n) for n in range(1, 10))]
    assert len(set(fixed)) == len(fixed)
    for ip in map(ipaddress.ip_address, fixed):
        assert ip in net and ip not in dyn and ip != net.network_address


def test_subnet_candidates_wrap_and_start_at_the_seed():
    c = subnet_candidates(255, count=3)
    assert c == ["10.231.255.0/24", "10.231.0.0/24", "10.231.1.0/24"]
    assert lay(subnet="10.231.9.0/24").broker_ip(2) == "10.231.9.12"


def test_names_carry_the_run_id():
    lo = lay()
    assert lo.network == "onceproof-0123abcdef" and lo.container("kafka2") == "onceproof-0123abcdef-kafka2"


def test_each_proxy_listens_where_the_brokers_advertise_it_and_forwards_to_the_right_listener():
    lo = lay(proxied=True)
    specs = {name: (listen, up) for name, listen, up in proxy_specs(3, lo)}
    assert len(specs) == 9
    for n in (1, 2, 3):
        adv = lo.advertised(n)
        for name, listener, port in (("client", "CLIENT", CLIENT_PORT), ("app", "APP", APP_PORT),
                                     ("internal", "INTERNAL", INTERNAL_PORT)):
            listen, up = specs[f"{name}-{n}"]
            assert listen.rpartition(":")[2] == adv[listener].rpartition(":")[2]
            assert up == f"kafka{n}:{port}"


def test_paths_a_partition_cuts():
    net = DockerFaultNetwork.__new__(DockerFaultNetwork)
    assert net.client_paths(2) == ["client-2", "app-2"]  # the workload's and the pipeline's way in
    assert net.isolation_paths(2) == ["node-2"]  # the network attachment: everything in and out
    assert set(net.broker_paths(2)) == {"client-2", "app-2", "internal-2"}


@pytest.mark.parametrize("status,pid,proc,want", [
    ("running", 41, "sleeping", (41, "sleeping")),
    ("running", 41, None, (41, "running")),
    ("paused", 41, None, (41, STOPPED)),
    ("exited", 0, None, (None, GONE)),
    ("created", 0, None, (None, GONE)),
    ("dead", 0, None, (None, GONE)),
    (None, None, None, (None, GONE)),
])
def test_container_states_map_onto_node_states(status, pid, proc, want):
    st = node_state(status, pid, proc)
    assert (st.pid, st.status) == want
    assert st.paused == (want[1] == STOPPED)
    assert st.alive == (want[1] != GONE)


def _pipeline(run: Path, master="local-cluster[2,1,1024]") -> PipelineArgs:
    return PipelineArgs(bootstrap="127.0.0.1:19091", sink="eos", checkpoint=run / "checkpoint",
                        control=run / "control", sink_log=run / "sink.jsonl", input_topic="input",
                        output_topic="output", progress_topic="p", sink_id="s", trigger_ms=1000, max_offsets=10,
                        txn_timeout_ms=30000, pool_size=6, master=master)


def test_one_mount_covers_the_run_and_the_repo_is_read_only(tmp_path):
    run = tmp_path / "results" / "t" / "20260101T000000"
    repo = tmp_path / "repo"
    vols = spark_volumes(_pipeline(run), run / "logs", repo=repo)
    assert vols == {str(run.resolve()): {"bind": str(run.resolve()), "mode": "rw"},
                    str(repo.resolve()): {"bind": str(repo.resolve()), "mode": "ro"}}
    assert shared_dirs([tmp_path / "a" / "b", tmp_path / "a", tmp_path / "c"]) == \
        sorted([(tmp_path / "a").resolve(), (tmp_path / "c").resolve()])
    assert shared_dirs([tmp_path / "ab", tmp_path / "a"]) == sorted([(tmp_path / "a").resolve(),
                                                                     (tmp_path / "ab").resolve()])


def test_the_in_network_pipeline_uses_the_app_listener_and_the_standalone_master(tmp_path):
    p = pipeline_for_network(_pipeline(tmp_path), "kafka1:9094", "spark://spark-master:7077")
    assert (p.bootstrap, p.master) == ("kafka1:9094", "spark://spark-master:7077")
    argv = p.argv()
    assert argv[argv.index("--bootstrap") + 1] == "kafka1:9094"
    q = pipeline_for_network(_pipeline(tmp_path, master="local[2]"), "kafka1:9094", "spark://x:7077")
    assert q.master == "local[2]", "a master the user chose is kept"


def test_the_driver_command_passes_every_argument_and_the_images_jars(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    for j in ("a.jar", "b c.jar"):
        (jars / j).write_text("")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "python").chmod(stat.S_IRWXU)
    log = tmp_path / "driver-1.log"
    argv = ["--bootstrap", "kafka1:9094", "--sink-id", "a b;$(x)"]
    cmd = driver_command(argv, jar_dir=str(jars))
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "ONCEPROOF_DRIVER_LOG": str(log)}
    subprocess.run(cmd, env=env, check=True, timeout=10)
    got = log.read_text().splitlines()
    assert got[:2] == ["-m", "onceproof.job"] and got[2:6] == argv
    assert got[6] == "--jars" and got[7] == f"local:{jars}/a.jar,local:{jars}/b c.jar"


def test_executors_are_the_current_apps_executor_jvms_in_docker_top():
    main = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
    top = {"Titles": ["PID", "COMMAND"], "Processes": [
        ["100", "java -cp ... org.apache.spark.deploy.worker.Worker --cores 1"],
        ["101", f"java -cp ... {main} --driver-url x --executor-id 0 --app-id app-1-0001 --cores 1"],
        ["102", f"java -cp ... {main} --driver-url x --executor-id 1 --app-id app-1-0000 --cores 1"],
        ["103", "python3 -m pyspark.daemon --app-id app-1-0001"],
    ]}
    assert executors_in(top, "app-1-0001") == [101]
    assert executors_in(top, None) == []
    assert executors_in({"Titles": ["UID", "CMD"], "Processes": [["0", main]]}, "a") == []


# Every general fault, every target (each verified by a run on this backend, but reassign-partitions and
# add-input-partitions: Admin requests from the host, not yet run here); not zombie-task nor upgrade.
CAPABILITIES = frozenset({"kill-executor", "kill-driver", "kill-driver-in-commit-window", "kill-broker:*",
                          "pause-broker:*", "commit-delay:*", "partition:*", "slow-network:*", "restart-mid-txn",
                          "bounce-broker:*", "rolling-restart", "elect-leaders", "reassign-partitions:*",
                          "add-input-partitions", "delete-input-records",
                          # toxics only: its network drops no packets (no PacketLoss)
                          "lossy-link:reset-peer", "lossy-link:timeout", "lossy-link:limit-data",
                          "delay-txn-requests:*",
                          # each node's release mount takes another release's jars (BrokerVersions)
                          "rolling-upgrade",
                          # a stopped container's log directory is its bind mount on the host (LogDirs); it has
                          # no size-limited disk (no DiskFaults): disk-full is refused
                          "corrupt-segment-tail:*"})


def test_the_backend_is_registered_and_declares_only_faults_that_exist():
    assert "docker" in registry.names()
    b = registry.get("docker")
    assert isinstance(b, DockerBackend) and b.capabilities == capabilities.derive(DockerBackend) == CAPABILITIES
    assert capabilities.spark_class(DockerBackend) is DockerSpark and isinstance(b, base.NetworkFaults)
    for spec in CAPABILITIES:
        name, _, target = spec.partition(":")
        assert name in catalog.FAULTS and (target in ("", "*") or target in catalog.target_choices()[name])
    for spec in catalog.all_specs():
        assert can_perform(CAPABILITIES, spec), spec


def test_a_docker_run_of_the_definition_of_done_validates_without_starting_anything(tmp_path):
    cfg = TestConfig(backend="docker", sink="eos",
                     nemesis=catalog.parse("kill-executor,kill-broker,pause-broker,partition"), time_limit=90,
                     seed=1, results_root=tmp_path / "r")
    assert cfg.validate() is cfg
    assert not (tmp_path / "r").exists()


def test_listening_ports_are_read_from_the_namespaces_tcp_table():
    from onceproof.backends.docker.cluster import listening_in

    rows = ["   0: 00000000:2383 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1",  # 9091 listen
            "   1: 0100007F:2384 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0 0 2 1",  # 9092 established
            "   2: 00000000000000000000000000000000:2385 00000000000000000000000000000000:0000 0A 0 0 0 0 0 3 1"]
    assert listening_in(rows) == {9091, 9093}


def _fake_bin(d: Path, name: str, script: str) -> None:
    f = d / name
    f.write_text(f"#!/bin/sh\n{script}\n")
    f.chmod(0o755)


@pytest.mark.parametrize("have, want", [
    ({"docker": "exit 0", "docker-compose": "exit 0"}, ["docker", "compose"]),   # the v2 plugin answers
    ({"docker": "exit 1", "docker-compose": "exit 0"}, ["docker-compose"]),      # no plugin: Debian's v1
    ({"docker": "exit 1"}, None),                                                # neither: None (install one)
])
def test_the_compose_cli_is_the_plugin_then_v1_then_none(tmp_path, monkeypatch, have, want):
    from onceproof.backends.docker.compose import COMPOSE_ENV, compose_command

    for name, script in have.items():
        _fake_bin(tmp_path, name, script)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(COMPOSE_ENV, raising=False)
    got = compose_command()
    assert (None if got is None else [Path(got[0]).name, *got[1:]]) == want
    monkeypatch.setenv(COMPOSE_ENV, "docker-compose --verbose")  # the override wins, whatever answers
    assert compose_command() == ["docker-compose", "--verbose"]


def test_the_docker_backend_has_no_second_pyspark_runtime_and_says_so(tmp_path):
    assert not issubclass(DockerSpark, base.Runtimes) and not hasattr(DockerSpark, "set_runtime")
    assert not can_perform(CAPABILITIES, "upgrade:pyspark")
    with pytest.raises(ConfigError) as e:
        TestConfig(backend="docker", sink="eos", nemesis=["upgrade:pyspark"], time_limit=90, seed=1,
                   results_root=tmp_path / "r").validate()
    assert e.value.option == "--nemesis" and "upgrade:pyspark" in e.value.message and "docker" in e.value.message


def test_the_docker_backend_starts_postgres_for_a_table_sink_with_one_address_per_side(tmp_path):
    """``--sink postgres`` passes the config check on docker (it starts a server: ``Databases``); the
    harness's DSN is the published loopback port, the pipeline's the container's alias on the network."""
    from onceproof.backends.docker.backend import DockerBackend
    from onceproof.backends.docker.database import DockerPostgres

    assert isinstance(DockerBackend(), base.Databases) and "postgres" in DockerBackend.databases
    TestConfig(backend="docker", sink="postgres", nemesis=["kill-broker"], time_limit=30, seed=1,
               results_root=tmp_path / "r").validate()
    db = DockerPostgres(site=None, image="onceproof/postgres:15", log_path=tmp_path / "postgres.log")
    db.port = 15432
    assert db.dsn.startswith("host=127.0.0.1 port=15432 ") and db.job_dsn.startswith("host=postgres port=5432 ")
    with pytest.raises(ValueError):
        DockerBackend().database("mysql", tmp_path, tmp_path)
