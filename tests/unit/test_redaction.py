"""``harness/redaction``: secrets in memory, the secrets rule of configuration files, and their removal
from logs and files. Each search test first plants the secret and finds it, so it can fail."""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
import logging
import pickle

import pytest

from onceproof.secrets import (
    MASK,
    RedactingFilter,
    Secret,
    SecretKeyError,
    Secrets,
    base64_forms,
    check_secret_keys,
    find_secrets,
    read_secret,
    scrub_file,
    scrub_text,
)

PW = "s3cr3t-Pa55word-4-onceproof"
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="op" password="{PW}";'


def registry() -> Secrets:
    s = Secrets()
    s.add(Secret(PW), "password")
    s.add_derived(Secret(JAAS), "jaas")
    return s


def test_a_secret_prints_as_stars_and_refuses_json_and_pickle():
    s = Secret(PW)
    assert repr(s) == str(s) == f"{s}" == f"{s:>10}" == MASK
    assert PW not in repr({"password": s}) and PW not in f"{[s]}"
    with pytest.raises(TypeError):
        json.dumps({"password": s})
    with pytest.raises(TypeError):
        pickle.dumps(s)
    assert copy.deepcopy(s) is s and s.reveal() == PW
    assert s == Secret(PW) and s != Secret(PW + "x") and s != PW
    with pytest.raises(TypeError):
        Secret(b"bytes")


def test_base64_forms_find_the_value_at_every_alignment_inside_longer_base64():
    forms = base64_forms(PW.encode())
    assert len(forms) == 3
    for pre in range(6):
        for post in (b"", b"x", b"xyz"):
            enc = base64.b64encode(b"u" * pre + PW.encode() + post).decode()
            assert any(f in enc for f in forms), (pre, post)
    # SASL/PLAIN's initial response (RFC 4616): \0user\0password, base64 on the wire and in debug logs
    assert any(f in base64.b64encode(b"\0op\0" + PW.encode()).decode() for f in forms)
    assert not any(f in base64.b64encode(b"an unrelated text of some length").decode() for f in forms)


def test_scrub_text_replaces_every_form_and_leaves_the_rest():
    s = registry()
    text = (f"user=op password={PW} jaas={JAAS} b64={base64.b64encode(PW.encode()).decode()} "
            f"json={json.dumps({'p': PW + chr(34)})}")
    clean = scrub_text(text, s)
    assert PW not in clean and "ScramLoginModule" not in clean and "user=op" in clean
    assert base64.b64encode(PW.encode()).decode()[:16] not in clean
    assert scrub_text("nothing here", s) == "nothing here"
    assert scrub_text(f"a {PW} b", PW) == f"a {MASK} b" and scrub_text("a b", "a b c") == "a b"  # one value, not chars


def test_secrets_register_the_json_escaped_form():
    tricky = 'pa"ss\\word-1234'
    s = Secrets([Secret(tricky)])
    dumped = json.dumps({"password": tricky})
    assert tricky not in dumped  # the escaped form is what a JSON file holds
    assert scrub_text(dumped, s) == json.dumps({"password": MASK})


def test_the_filter_redacts_messages_arguments_and_tracebacks():
    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    h.addFilter(RedactingFilter(registry()))
    log = logging.getLogger("onceproof.test.redaction")
    child = logging.getLogger("onceproof.test.redaction.child")  # propagates to the handler
    log.addHandler(h)
    log.propagate = False
    log.setLevel(logging.INFO)
    try:
        log.warning("connecting with %s", f"sasl.password={PW}")
        child.error(f"jaas: {JAAS}")
        try:
            raise RuntimeError(f"auth failed for password {PW}")
        except RuntimeError:
            log.exception("failed")
        log.info("%d records", 3)
    finally:
        log.removeHandler(h)
    out = buf.getvalue()
    assert PW not in out and "ScramLoginModule" not in out
    assert out.count(MASK) >= 3 and "3 records" in out and "RuntimeError" in out


def test_without_the_filter_the_planted_secret_is_in_the_log(tmp_path):
    """The control of the test above: a log written without the filter holds the secret, find_secrets
    finds it, scrub_file removes it."""
    f = tmp_path / "logs" / "driver-1.log"
    f.parent.mkdir()
    h = logging.FileHandler(f)
    log = logging.getLogger("onceproof.test.redaction.plain")
    log.addHandler(h)
    log.propagate = False
    log.warning("sasl.jaas.config=%s", JAAS)
    h.close()
    log.removeHandler(h)
    s = registry()
    assert (f, "jaas") in find_secrets(tmp_path, s) and (f, "password") in find_secrets(tmp_path, s)
    assert scrub_file(f, s) >= 1
    assert find_secrets(tmp_path, s) == []
    assert MASK in f.read_text()


def test_find_secrets_walks_every_file_gz_included_and_scrub_file_cleans_them(tmp_path):
    s = registry()
    (tmp_path / "logs").mkdir()
    plain = tmp_path / "logs" / "clients.log"
    plain.write_text(f"line 1\nsasl.password={PW}\n")
    gz = tmp_path / "history.jsonl.gz"
    gz.write_bytes(gzip.compress(("x" * 3_000_000 + f' "jaas": "{JAAS}"\n').encode()))  # past the 1 MiB chunks
    b64 = tmp_path / "logs" / "debug.log"
    b64.write_text("SASL PLAIN initial response: " + base64.b64encode(b"\0op\0" + PW.encode()).decode())
    clean = tmp_path / "test.json"
    clean.write_text(json.dumps({"password_env": "ONCEPROOF_KAFKA_PASSWORD"}))
    os_mode = 0o640
    plain.chmod(os_mode)

    found = find_secrets(tmp_path, s)
    assert (plain, "password") in found and (gz, "jaas") in found and (gz, "password") in found
    assert (b64, "password/base64") in found
    assert all(p != clean for p, _ in found)
    assert all(PW not in form for _, form in found)  # forms are names, never the value

    for p in {p for p, _ in found}:
        assert scrub_file(p, s) >= 1
    assert find_secrets(tmp_path, s) == []
    assert gzip.decompress(gz.read_bytes()).endswith(f' "jaas": "{MASK}"\n'.encode())
    assert plain.stat().st_mode & 0o777 == os_mode
    assert scrub_file(clean, s) == 0
    assert not list(tmp_path.rglob("*.scrub"))


def test_a_secret_across_a_chunk_boundary_is_found(tmp_path, monkeypatch):
    from onceproof import secrets as redaction
    monkeypatch.setattr(redaction, "CHUNK", 7)
    f = tmp_path / "a.log"
    f.write_text("0123456789" + PW + "tail")
    assert find_secrets(f, [Secret(PW)]) == [(f, "value")]
    assert find_secrets(tmp_path, []) == []


@pytest.mark.parametrize("key", ["password", "sasl_password", "secret", "client_secret", "token", "api_token",
                                 "jaas", "sasl_jaas_config", "key", "ssl_key", "Password"])
def test_the_secrets_rule_refuses_inline_secrets_and_names_the_key_and_the_fix(key):
    with pytest.raises(SecretKeyError) as e:
        check_secret_keys({"kafka": {"bootstrap": "b:1", "security": {key: "x"}}})
    msg = str(e.value)
    assert msg.startswith(f"kafka.security.{key}:")
    assert f"{key}_env = " in msg and f"{key}_file = " in msg


def test_the_secrets_rule_accepts_env_and_file_keys_and_other_keys():
    check_secret_keys({"kafka": {"security": {"password_env": "P", "password_file": "~/p", "ca_file": "c.pem",
                                              "username": "u", "protocol": "SASL_SSL", "key_file": "k.pem",
                                              "keystore_location": "x"}},
                       "nodes": [{"host": "a", "ssh_key_file": "~/.ssh/id"}]})
    with pytest.raises(SecretKeyError, match=r"^nodes\[1\]\.api_token:"):
        check_secret_keys({"nodes": [{"host": "a"}, {"api_token": "t"}]})


def test_read_secret_from_the_environment_or_a_file(tmp_path):
    assert read_secret({"password_env": "P"}, "password", env={"P": PW}).reveal() == PW
    f = tmp_path / "kafka.pass"
    f.write_text(PW + "\n")
    assert read_secret({"password_file": "kafka.pass"}, "password", base_dir=tmp_path).reveal() == PW
    assert read_secret({}, "password") is None
    with pytest.raises(ValueError, match=r"^s\.password_env: the environment variable P is not set"):
        read_secret({"password_env": "P"}, "password", env={}, where="s")
    with pytest.raises(ValueError, match="password_file: cannot read"):
        read_secret({"password_file": str(tmp_path / "none")}, "password")
    with pytest.raises(ValueError, match="give one of them"):
        read_secret({"password_env": "P", "password_file": "f"}, "password")
