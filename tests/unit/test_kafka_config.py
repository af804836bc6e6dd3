"""``kafka_config``: the security section, its librdkafka and Spark forms, and the one function
every Kafka client of the harness builds its configuration with (PLAINTEXT: exactly the old dicts)."""

from __future__ import annotations

import ast
import logging
import pickle
import sys
from pathlib import Path

import pytest

from onceproof import kafka_config
from onceproof.kafka_config import (
    PLAINTEXT,
    KafkaConfigError,
    KafkaSecurity,
    client_config,
    configure,
    spark_options,
)
from onceproof.secrets import Secret, SecretKeyError, find_secrets

SRC = Path(__file__).resolve().parents[2] / "src" / "onceproof"
PW = "Sup3r-s3cret-kafka-pw"
SASL = {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": "onceproof",
        "password_env": "ONCEPROOF_KAFKA_PASSWORD"}


@pytest.fixture(autouse=True)
def plaintext_after():
    yield
    configure(PLAINTEXT)


def sasl(**over) -> KafkaSecurity:
    return KafkaSecurity.from_mapping({**SASL, **over}, env={"ONCEPROOF_KAFKA_PASSWORD": PW})


def test_plaintext_gives_exactly_the_old_dicts():
    log = logging.getLogger("x")
    assert kafka_config.current() == PLAINTEXT == KafkaSecurity.from_mapping({})
    assert client_config("h:1,h:2", {"socket.timeout.ms": 10000}, logger=log) == \
        {"bootstrap.servers": "h:1,h:2", "socket.timeout.ms": 10000, "logger": log}
    assert list(client_config("h:1", {"a.b": 1})) == ["bootstrap.servers", "a.b"]
    assert spark_options("h:1") == {"kafka.bootstrap.servers": "h:1"}
    assert PLAINTEXT.to_librdkafka() == {} and PLAINTEXT.to_spark_options() == {}


def test_sasl_ssl_scram_in_librdkafka_and_spark_forms(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    s = KafkaSecurity.from_mapping({**SASL, "ca_file": "ca.pem"}, env={"ONCEPROOF_KAFKA_PASSWORD": PW},
                                   base_dir=tmp_path)
    assert s.to_librdkafka() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                 "sasl.username": "onceproof", "sasl.password": PW,
                                 "ssl.ca.location": str(ca)}
    assert s.to_spark_options() == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  f'username="onceproof" password="{PW}";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca)}
    plain = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "u", Secret('a"b\\c'))
    assert plain.jaas_config().reveal() == \
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="a\\"b\\\\c";'
    assert KafkaSecurity("SSL").to_librdkafka() == {"security.protocol": "SSL"}


def test_configure_reaches_client_config_and_spark_options():
    configure(sasl())
    c = client_config("h:1", {"socket.timeout.ms": 5000})
    assert c["bootstrap.servers"] == "h:1" and c["sasl.password"] == PW and c["socket.timeout.ms"] == 5000
    assert spark_options("h:1")["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    with pytest.raises(ValueError, match="sasl.password"):
        client_config("h:1", {"sasl.password": "other"})
    with pytest.raises(ValueError, match="bootstrap.servers"):
        client_config("h:1", {"bootstrap.servers": "other:1"})
    with pytest.raises(ValueError, match="empty bootstrap"):
        client_config("")
    with pytest.raises(TypeError):
        configure({"protocol": "SSL"})


def test_librdkafka_accepts_every_setting_it_is_given():
    """The keys and values are librdkafka's (a client refuses an unknown property or value at once)."""
    from confluent_kafka.admin import AdminClient

    for security in (sasl(), sasl(mechanism="PLAIN", protocol="SASL_PLAINTEXT"), sasl(mechanism="scram-sha-256"),
                     KafkaSecurity("SSL")):
        configure(security)
        AdminClient(client_config("127.0.0.1:9", {"log_level": 0}))


def test_the_security_prints_no_password_and_registers_its_forms(tmp_path):
    s = sasl()
    assert PW not in repr(s) and PW not in str(s)
    forms = dict(s.secrets().forms())
    assert {"password", "jaas", "password/base64"} <= set(forms)
    (tmp_path / "spark.conf").write_text(f"kafka.sasl.jaas.config={s.to_spark_options()['kafka.sasl.jaas.config']}")
    assert {f for _, f in find_secrets(tmp_path, s.secrets())} >= {"jaas", "password"}
    assert PLAINTEXT.secrets().forms() == []


def test_an_inline_password_names_the_key_and_the_fix():
    with pytest.raises(SecretKeyError, match=r'kafka\.security\.password: .*password_env = "ONCEPROOF_'):
        KafkaSecurity.from_mapping({**SASL, "password": PW})
    with pytest.raises(SecretKeyError, match=r"kafka\.security\.sasl_jaas_config:"):
        KafkaSecurity.from_mapping({"protocol": "SASL_SSL", "sasl_jaas_config": "..."})


@pytest.mark.parametrize("mapping, env, message", [
    ({**SASL, "protocol": "TLS"}, {"ONCEPROOF_KAFKA_PASSWORD": PW}, r"protocol = 'TLS': one of PLAINTEXT"),
    ({**SASL, "mechanism": "GSSAPI"}, {"ONCEPROOF_KAFKA_PASSWORD": PW}, r"mechanism = 'GSSAPI'"),
    ({**SASL, "username": ""}, {"ONCEPROOF_KAFKA_PASSWORD": PW}, r"username: SASL_SSL needs"),
    (SASL, {}, r"password_env: the environment variable ONCEPROOF_KAFKA_PASSWORD is not set"),
    ({"protocol": "SASL_SSL", "mechanism": "PLAIN", "username": "u"}, {}, r"needs the SASL password"),
    ({"protocol": "SSL", "username": "u"}, {}, r"only with SASL_PLAINTEXT or SASL_SSL"),
    ({"protocol": "PLAINTEXT", "ca_file": __file__}, {}, r"ca_file: only with SSL or SASL_SSL"),
    ({"protocol": "SSL", "ca_file": "/nonexistent/ca.pem"}, {}, r"ca_file: no such file"),
    ({"protocol": "SSL", "truststore": "x"}, {}, r"kafka\.security\.truststore: unknown key; known: protocol"),
])
def test_an_unusable_section_names_the_key(mapping, env, message):
    with pytest.raises(KafkaConfigError, match=message) as e:
        KafkaSecurity.from_mapping(mapping, env=env)
    assert str(e.value).startswith("kafka.security")


def test_no_kafka_client_builds_its_own_bootstrap_dict():
    """Every librdkafka configuration goes through client_config (the security seam): no module but
    kafka_config writes the key ``bootstrap.servers`` in a dict (Spark's ``kafka.bootstrap.servers``
    options of the job are the pipeline's, wired later)."""
    offenders = []
    for f in SRC.rglob("*.py"):
        if f.name == "kafka_config.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "bootstrap.servers"
                                                  for k in node.keys):
                offenders.append(f"{f.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("module", ["kafka_config.py", "secrets.py"])
def test_the_seam_imports_the_standard_library_only(module):
    """The pipeline imports kafka_config on Spark's Python, which need not have the harness's packages."""
    tree = ast.parse((SRC / module).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    outside = names - set(sys.stdlib_module_names) - {"__future__"}
    assert outside <= {"onceproof"}
    froms = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
             and n.module.startswith("onceproof")}
    assert froms <= {"onceproof.secrets"}


def test_the_harness_clients_take_the_configured_security(monkeypatch):
    """topics.admin and the live reader pass what client_config gives (a SASL setting reaches them)."""
    from onceproof.clients import topics

    seen = []
    monkeypatch.setattr(topics, "AdminClient", lambda conf: seen.append(conf) or object())
    configure(sasl())
    topics.admin("h:1")
    assert seen[0]["sasl.username"] == "onceproof" and seen[0]["socket.timeout.ms"] == 10000
    configure(PLAINTEXT)
    topics.admin("h:1")
    assert set(seen[1]) == {"bootstrap.servers", "socket.timeout.ms", "logger"}


def test_the_driver_gets_the_security_through_its_environment_and_executors_through_parts():
    from onceproof import kafka_config as kc
    sec = KafkaSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="op",
                        password=Secret("pw-1234567"), ca_file=Path("/certs/ca.pem"))
    env = kc.to_environment(sec)
    assert set(env) == {kc.SECURITY_ENV, kc.PASSWORD_ENV} and "pw-1234567" not in env[kc.SECURITY_ENV]
    back = kc.from_environment(env)
    assert back == sec and back.to_librdkafka() == sec.to_librdkafka()
    assert kc.from_environment({}) == kc.PLAINTEXT and kc.to_environment(kc.PLAINTEXT) == {}
    parts = kc.to_parts(sec)
    assert pickle.loads(pickle.dumps(parts)) == parts and kc.from_parts(parts) == sec
    assert kc.to_parts(kc.PLAINTEXT) == () and kc.from_parts(()) == kc.PLAINTEXT
    with pytest.raises(KafkaConfigError, match="SCRAM-SHA-512 .*password|password_env or password_file"):
        kc.from_environment({kc.SECURITY_ENV: env[kc.SECURITY_ENV]})


def test_a_sink_config_never_prints_its_password():
    from onceproof import kafka_config as kc
    from onceproof.pipeline.transactional_sink import SinkConfig
    sec = KafkaSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="op", password=Secret("pw-1234567"))
    cfg = SinkConfig(bootstrap="b:9092", output_topic="o", progress_topic="p", sink_id="s", security=kc.to_parts(sec))
    assert "pw-1234567" not in repr(cfg) + str(cfg) and "security=***" in repr(cfg)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
