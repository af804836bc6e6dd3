"""The one place a Kafka client's connection settings are made: the bootstrap servers and the security
settings of the cluster under test (issue 28, design §1.3 and §4.3).

Every Kafka client of the harness (the topic admin and readers, the live reader, the LSO sampler, the
workload's producers, the nemeses' probes, the health checks) builds its configuration with
:func:`client_config` instead of ``{"bootstrap.servers": ...}``; the harness's Spark reads use
:func:`spark_options`. :func:`configure` sets the process-wide :class:`KafkaSecurity` once per run; the
default, PLAINTEXT, adds no key, so the dicts are exactly the ones the clients built before.

The pipeline's modules (``onceproof.pipeline``, run on Spark's Python) use :func:`client_config` too,
the driver configures itself from its environment (:func:`from_environment`, written by the backend with
:func:`to_environment`: never argv), and a sink's executors from the parts its closure carries
(:func:`to_parts`, :func:`from_parts`).

Protocol sources:

* librdkafka's ``CONFIGURATION.md``: ``bootstrap.servers``, ``security.protocol``
  (``plaintext, ssl, sasl_plaintext, sasl_ssl``), ``sasl.mechanism`` (alias of ``sasl.mechanisms``),
  ``sasl.username``, ``sasl.password``, ``ssl.ca.location``.
* Spark's "Structured Streaming + Kafka Integration Guide", section "Kafka Specific Configurations" and
  "Security": Kafka's own settings are the source/sink options prefixed ``kafka.``
  (``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``).
* Kafka's Java client: ``sasl.jaas.config`` is one JAAS login-module line, ``<LoginModule> required
  username="..." password="...";`` with ``org.apache.kafka.common.security.plain.PlainLoginModule``
  (SASL/PLAIN, KIP-85 for the property) or ``org.apache.kafka.common.security.scram.ScramLoginModule``
  (SCRAM-SHA-256/512, KIP-84; KIP-554 manages the credentials through the Admin API);
  ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` a PEM CA file (KIP-651).

Standard library (plus ``onceproof.secrets``) only: the pipeline imports this module on Spark's Python.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from onceproof.secrets import Secret, Secrets, check_secret_keys, read_secret

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""``security.protocol`` values (librdkafka and the Java client take the same names)."""

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The SASL mechanisms supported, with the Java client's JAAS login module of each."""

KEYS = ("protocol", "mechanism", "username", "password_env", "password_file", "ca_file")
"""The keys :meth:`KafkaSecurity.from_mapping` takes (``[kafka.security]`` of ``cluster.toml``)."""


class KafkaConfigError(ValueError):
    """A security section that cannot be used; the message names the key and the fix."""


def _jaas_quote(s: str) -> str:
    # Kafka's JaasConfig parses the line with java.io.StreamTokenizer: '"' quotes, '\' escapes
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaSecurity:
    """How the harness's clients authenticate to the cluster and encrypt, in a client-neutral form.

    Attributes:
        protocol: one of :data:`PROTOCOLS`; ``PLAINTEXT`` (the default) adds no setting at all.
        mechanism: with ``SASL_*``: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``; else empty.
        username: the SASL user; with ``SASL_*`` only.
        password: the SASL password as a :class:`Secret`; with ``SASL_*`` only.
        ca_file: a PEM file of the CA(s) that signed the brokers' certificates, with ``SSL``/``SASL_SSL``
            (``None``: the client's default trust store).

    Raises (at construction): :class:`KafkaConfigError` for an unknown protocol or mechanism, SASL
    without a mechanism, user or password, SASL fields without SASL, or a CA file without TLS.
    """

    protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: Secret | None = None
    ca_file: Path | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise KafkaConfigError(f"protocol = {self.protocol!r}: one of {', '.join(PROTOCOLS)}")
        sasl = self.protocol.startswith("SASL_")
        if sasl:
            if self.mechanism not in LOGIN_MODULES:
                raise KafkaConfigError(f"mechanism = {self.mechanism!r}: with {self.protocol}, one of "
                                       f"{', '.join(LOGIN_MODULES)}")
            if not self.username:
                raise KafkaConfigError(f"username: {self.protocol} needs the SASL user name")
            if not self.password:
                raise KafkaConfigError(f"password_env or password_file: {self.protocol} needs the SASL password")
        elif self.mechanism or self.username or self.password is not None:
            raise KafkaConfigError(f"mechanism, username, password_*: only with SASL_PLAINTEXT or SASL_SSL, "
                                   f"not {self.protocol}")
        if self.ca_file is not None and not self.protocol.endswith("SSL"):
            raise KafkaConfigError(f"ca_file: only with SSL or SASL_SSL, not {self.protocol}")

    @classmethod
    def from_mapping(cls, m: Mapping, *, env: Mapping[str, str] | None = None, base_dir: Path | None = None,
                     where: str = "kafka.security") -> KafkaSecurity:
        """A :class:`KafkaSecurity` from a parsed ``[kafka.security]`` table (keys :data:`KEYS`);
        an empty mapping is PLAINTEXT. The password comes from ``password_env`` (a variable of ``env``,
        default ``os.environ``) or ``password_file`` (relative to ``base_dir``); ``ca_file`` too is
        relative to ``base_dir``.

        Raises: ``SecretKeyError`` (a ``ValueError``) for a secret written inline (``password = ...``,
        design §4.3), :class:`KafkaConfigError` for an unknown key, a missing variable or file, or an
        inconsistent section; each message starts with ``where.<key>``.
        """
        check_secret_keys(m, where)
        unknown = sorted(set(m) - set(KEYS))
        if unknown:
            raise KafkaConfigError(f"{where}.{unknown[0]}: unknown key; known: {', '.join(KEYS)}")
        try:
            password = read_secret(m, "password", env=env, base_dir=base_dir, where=where)
        except ValueError as e:
            raise KafkaConfigError(str(e)) from None
        ca = None
        if m.get("ca_file"):
            ca = Path(str(m["ca_file"])).expanduser()
            if not ca.is_absolute() and base_dir is not None:
                ca = Path(base_dir) / ca
            if not ca.is_file():
                raise KafkaConfigError(f"{where}.ca_file: no such file {ca}")
        try:
            return cls(protocol=str(m.get("protocol", "PLAINTEXT")).upper(),
                       mechanism=str(m.get("mechanism", "")).upper(), username=str(m.get("username", "")),
                       password=password, ca_file=ca)
        except KafkaConfigError as e:
            raise KafkaConfigError(f"{where}: {e}") from None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def jaas_config(self) -> Secret | None:
        """The Java client's ``sasl.jaas.config`` line (a :class:`Secret`: it holds the password), or
        ``None`` without SASL. E.g. ``org.apache.kafka.common.security.scram.ScramLoginModule required
        username="u" password="p";``."""
        if not self.sasl or self.password is None:
            return None
        return Secret(f"{LOGIN_MODULES[self.mechanism]} required username={_jaas_quote(self.username)} "
                      f"password={_jaas_quote(self.password.reveal())};")

    def to_librdkafka(self) -> dict[str, str]:
        """librdkafka settings (``confluent_kafka`` clients) beyond ``bootstrap.servers``: ``{}`` for
        PLAINTEXT; else ``security.protocol``, and with SASL ``sasl.mechanism``, ``sasl.username``,
        ``sasl.password`` (revealed: hand the dict to a client only), with a CA ``ssl.ca.location``."""
        if self.protocol == "PLAINTEXT":
            return {}
        out = {"security.protocol": self.protocol}
        if self.sasl:
            out |= {"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                    "sasl.password": self.password.reveal()}
        if self.ca_file is not None:
            out["ssl.ca.location"] = str(self.ca_file)
        return out

    def to_spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (``kafka.``-prefixed Java client settings) beyond
        ``kafka.bootstrap.servers``: ``{}`` for PLAINTEXT; else ``kafka.security.protocol``, with SASL
        ``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config`` (revealed), with a CA
        ``kafka.ssl.truststore.type=PEM`` and ``kafka.ssl.truststore.location``.

        Spark's default ``spark.redaction.regex`` matches *keys* (``secret|password|token``), not
        ``kafka.sasl.jaas.config``: whoever passes these options sets ``spark.redaction.string.regex``
        too (design §4.3)."""
        if self.protocol == "PLAINTEXT":
            return {}
        out = {"kafka.security.protocol": self.protocol}
        if self.sasl:
            out |= {"kafka.sasl.mechanism": self.mechanism, "kafka.sasl.jaas.config": self.jaas_config().reveal()}
        if self.ca_file is not None:
            out |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(self.ca_file)}
        return out

    def secrets(self) -> Secrets:
        """The registry of this security's secrets: the password (with its base64 and JSON forms) and
        the JAAS line (``harness.redaction``)."""
        s = Secrets()
        if self.password is not None:
            s.add(self.password, "password")
            s.add_derived(self.jaas_config(), "jaas")
        return s


PLAINTEXT = KafkaSecurity()

SECURITY_ENV = "ONCEPROOF_KAFKA_SECURITY"
"""The variable that carries a security's non-secret fields to the driver, as JSON (absent: PLAINTEXT)."""
PASSWORD_ENV = "ONCEPROOF_KAFKA_PASSWORD"
"""The variable that carries the SASL password to the driver: the environment, never argv or Spark's conf."""


def to_environment(sec: KafkaSecurity) -> dict[str, str]:
    """The driver's environment for ``sec``: ``{}`` for PLAINTEXT; else :data:`SECURITY_ENV` (protocol,
    mechanism, username, CA file as JSON) and, with SASL, :data:`PASSWORD_ENV` (revealed: hand it to a
    child's environment only)."""
    if sec.protocol == "PLAINTEXT":
        return {}
    out = {SECURITY_ENV: json.dumps({"protocol": sec.protocol, "mechanism": sec.mechanism, "username": sec.username,
                                     "ca_file": str(sec.ca_file) if sec.ca_file else ""})}
    if sec.password is not None:
        out[PASSWORD_ENV] = sec.password.reveal()
    return out


def from_environment(env: Mapping[str, str] | None = None) -> KafkaSecurity:
    """The security :func:`to_environment` wrote (PLAINTEXT when :data:`SECURITY_ENV` is unset).

    Raises: :class:`KafkaConfigError` when the JSON is broken or SASL comes without its password."""
    env = os.environ if env is None else env
    raw = env.get(SECURITY_ENV, "")
    if not raw:
        return PLAINTEXT
    try:
        f = json.loads(raw)
    except ValueError as e:
        raise KafkaConfigError(f"{SECURITY_ENV}: not JSON ({e})") from None
    pw = env.get(PASSWORD_ENV, "")
    return KafkaSecurity(protocol=f.get("protocol", "PLAINTEXT"), mechanism=f.get("mechanism", ""),
                         username=f.get("username", ""), password=Secret(pw) if pw else None,
                         ca_file=Path(f["ca_file"]) if f.get("ca_file") else None)


def to_parts(sec: KafkaSecurity) -> tuple[str, ...]:
    """``sec`` as a plain tuple that pickles (a :class:`Secret` refuses to): what a sink's task closure
    carries to the executors, which call :func:`configure` with :func:`from_parts`. ``()`` for PLAINTEXT.
    The password is in it, revealed: it goes into no log, conf or argv."""
    if sec.protocol == "PLAINTEXT":
        return ()
    return (sec.protocol, sec.mechanism, sec.username, sec.password.reveal() if sec.password else "",
            str(sec.ca_file) if sec.ca_file else "")


def from_parts(parts: tuple[str, ...]) -> KafkaSecurity:
    """The security :func:`to_parts` flattened (PLAINTEXT for ``()``)."""
    if not parts:
        return PLAINTEXT
    protocol, mechanism, username, password, ca = parts
    return KafkaSecurity(protocol=protocol, mechanism=mechanism, username=username,
                         password=Secret(password) if password else None, ca_file=Path(ca) if ca else None)

_security: KafkaSecurity = PLAINTEXT


def configure(security: KafkaSecurity) -> None:
    """Set the process-wide security every :func:`client_config` applies. Call it once per run, before
    any client is made (the runner does, with PLAINTEXT until a backend supplies one)."""
    global _security
    if not isinstance(security, KafkaSecurity):
        raise TypeError(f"configure() takes a KafkaSecurity, not {type(security).__name__}")
    _security = security


def current() -> KafkaSecurity:
    """The security :func:`configure` set last (PLAINTEXT by default)."""
    return _security


def client_config(bootstrap: str, settings: Mapping | None = None, /, **extra) -> dict:
    """A librdkafka configuration (``confluent_kafka`` ``Producer``/``Consumer``/``AdminClient``):
    ``{"bootstrap.servers": bootstrap, **security, **settings, **extra}``. ``settings`` holds the dotted
    keys (``{"socket.timeout.ms": 5000}``); ``extra`` the ones that are identifiers (``logger=...``).

    Raises: ``ValueError`` when ``bootstrap`` is empty or the settings set ``bootstrap.servers`` or a
    security key (those come from here only).
    """
    if not bootstrap:
        raise ValueError("client_config: empty bootstrap servers")
    sec = _security.to_librdkafka()
    own = {**(settings or {}), **extra}
    clash = sorted(k for k in own if k == "bootstrap.servers" or k in sec or k.startswith(("security.", "sasl.")))
    if clash:
        raise ValueError(f"client_config: {', '.join(clash)} come from kafka_config.configure(), not a caller")
    return {"bootstrap.servers": bootstrap, **sec, **own}


def spark_options(bootstrap: str) -> dict[str, str]:
    """Options for Spark's Kafka source/sink: ``{"kafka.bootstrap.servers": bootstrap, **security}``
    (:meth:`KafkaSecurity.to_spark_options` of :func:`current`)."""
    if not bootstrap:
        raise ValueError("spark_options: empty bootstrap servers")
    return {"kafka.bootstrap.servers": bootstrap, **_security.to_spark_options()}
