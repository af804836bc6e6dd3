"""The broker settings of a KRaft node (``server.properties``), one source for every backend.

Configuration facts follow the Kafka 4.x broker docs (https://kafka.apache.org/documentation/#brokerconfigs):
``min.insync.replicas=2`` with RF 3 lets one broker fail without losing acknowledged (``acks=all``) writes;
``transaction.state.log.*`` gives the transaction coordinator the same durability.
"""

from __future__ import annotations

from pathlib import Path

from onceproof.backends.common.layout import ClusterSpec, NodeSpec

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
"""
"""A broker's log4j2 configuration (``{log}``: its log file): one file per broker, the state-change log at WARN;
every backend that writes a broker's own config uses it."""


def server_properties(spec: ClusterSpec, n: NodeSpec, log_dir: Path) -> str:
    """The ``server.properties`` text (``key=value`` lines) of KRaft node ``n`` of cluster ``spec``, its
    log segments under ``log_dir``. One source of the broker settings (RF 3, min ISR 2, no unclean
    election, ...) for every backend: ``backends/docker/layout.py`` rewrites only its listeners, quorum
    and data directory."""
    def voter_port(m: NodeSpec) -> int:
        return m.controller_port if (not spec.proxied or m.node_id == n.node_id) else n.controller_via(m.node_id)

    voters = ",".join(f"{m.node_id}@127.0.0.1:{voter_port(m)}" for m in spec.node_specs)
    adv_client = n.client_proxy if spec.proxied else n.client_port
    adv_internal = n.internal_proxy if spec.proxied else n.internal_port
    props = {
        "process.roles": "broker,controller",
        "node.id": n.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"CLIENT://127.0.0.1:{n.client_port},INTERNAL://127.0.0.1:{n.internal_port},"
                     f"CONTROLLER://127.0.0.1:{n.controller_port}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{adv_client},INTERNAL://127.0.0.1:{adv_internal}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(log_dir),
        "num.partitions": 6,
        "default.replication.factor": min(3, spec.nodes),
        "min.insync.replicas": min(2, spec.nodes),
        "offsets.topic.replication.factor": min(3, spec.nodes),
        "offsets.topic.num.partitions": 6,
        "transaction.state.log.replication.factor": min(3, spec.nodes),
        "transaction.state.log.min.isr": min(2, spec.nodes),
        "transaction.state.log.num.partitions": 6,
        "share.coordinator.state.topic.replication.factor": min(3, spec.nodes),
        "share.coordinator.state.topic.min.isr": min(2, spec.nodes),
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "num.replica.fetchers": 1,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.segment.bytes": 64 * 1024 * 1024,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 5000,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 60000,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())
