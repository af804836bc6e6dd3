"""Secrets in memory and their removal from everything a run writes (issue 28, design §4.3).

* :class:`Secret` holds one value (a Kafka password): it prints as ``***``, ``json.dumps`` and pickle
  refuse it, and only :meth:`Secret.reveal` gives the value, at the one place that hands it to a client.
* :class:`Secrets` registers each value with the forms it may take on the way out: the value itself, its
  JSON-escaped form, its base64 at each of the three byte alignments (a value inside a longer base64
  text, e.g. a SASL/PLAIN ``\\0user\\0password`` token, RFC 4616), and any derived string (the JAAS line
  Spark's Kafka source takes, see ``kafka_config``).
* Out: :class:`RedactingFilter` (a ``logging.Filter`` for handlers), :func:`scrub_text`,
  :func:`scrub_file` (``.gz`` included), and :func:`find_secrets`, the check that a run directory holds
  none of the forms.

The rule that keeps secrets out of the files a user writes (``cluster.toml``, ``nodes.toml``):
:func:`check_secret_keys`: a key matching ``(?i)pass|secret|token|jaas|key$`` must end in ``_env``
(the name of an environment variable) or ``_file`` (a path), never hold the value.

Written here rather than taken from a library: the maintained log scrubbers (e.g. ``logredactor``,
``scrubadub``) redact by patterns or PII classes, not by a registry of exact values and their
encodings, and none walks a directory's ``.gz`` files. Standard library only: the pipeline's Python
(``onceproof.pipeline``, on Spark's interpreter) imports ``kafka_config``, which imports this.
"""

from __future__ import annotations

import base64
import gzip
import hmac
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

MASK = "***"
"""What every registered form is replaced with, and what a :class:`Secret` prints as."""

SECRET_KEY = re.compile(r"(?i)pass|secret|token|jaas|key$")
"""Keys of a configuration file that would hold a secret (design §4.3)."""

SECRET_KEY_SUFFIXES = ("_env", "_file")
"""The allowed endings of such a key: the name of an environment variable, or a file's path."""


class SecretKeyError(ValueError):
    """A configuration key would hold a secret inline; the message names the key and the fix."""


class Secret:
    """One secret value (``str``). ``repr``/``str``/``format`` give ``***``; ``json.dumps`` raises
    ``TypeError`` (it is not a ``str``); pickling raises ``TypeError`` so it never travels by accident
    (to Spark executors, into a checkpoint); ``copy``/``deepcopy`` return the same object. Equality
    compares the values (constant time, ``hmac.compare_digest``)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a Secret holds a str, not {type(value).__name__}")
        self._value = value

    def reveal(self) -> str:
        """The value. Call it only where a client takes the value (a librdkafka dict, a JAAS line)."""
        return self._value

    def __repr__(self) -> str:
        return MASK

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return MASK

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self):
        raise TypeError("a Secret is not pickled: pass the revealed value where a client needs it")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict) -> Secret:
        return self


def _text(value: str | Secret) -> str:
    return value.reveal() if isinstance(value, Secret) else value


def base64_forms(value: bytes) -> list[str]:
    """The base64 text of ``value`` wherever it sits in a longer base64-encoded byte string: one text
    per alignment (offset mod 3), each cut to the characters that depend on ``value``'s bytes only
    (RFC 4648 §4: each 3 input bytes make 4 characters). Texts shorter than 4 characters are left out
    (too short to mean anything); the alignment at offset 0 comes first."""
    out: list[str] = []
    for pad in range(3):
        data = b"\0" * pad + value
        enc = base64.b64encode(data).decode()
        first = 1 if pad else 0  # the first group holding no padding byte
        last = len(data) // 3  # the groups after it hold "=" or depend on what follows the value
        core = enc[4 * first:4 * last]
        if len(core) >= 4 and core not in out:
            out.append(core)
    return out


class Secrets:
    """A registry of secret values and the forms they may be written in. Shapes: :meth:`forms` is a
    list of ``(form name, text)``, longest text first (so a replacement never leaves part of a longer
    form behind). Not thread-safe to register from several threads; reading is."""

    def __init__(self, values: Iterable[str | Secret] = ()) -> None:
        self._forms: dict[str, str] = {}  # text -> form name
        for v in values:
            self.add(v)

    def add(self, value: str | Secret, name: str = "value") -> None:
        """Register ``value`` (empty: ignored) as ``name``, with its JSON-escaped and base64 forms
        (``name+"/json"``, ``name+"/base64"``)."""
        text = _text(value)
        if not text:
            return
        self._forms.setdefault(text, name)
        escaped = json.dumps(text)[1:-1]
        if escaped != text:
            self._forms.setdefault(escaped, f"{name}/json")
        for b in base64_forms(text.encode()):
            self._forms.setdefault(b, f"{name}/base64")

    def add_derived(self, text: str | Secret, name: str) -> None:
        """Register a string built from a secret (a JAAS line) as ``name``, with its JSON-escaped form."""
        self.add(text, name)

    def forms(self) -> list[tuple[str, str]]:
        """``[(form name, text)]``, longest text first."""
        return sorted(((n, t) for t, n in self._forms.items()), key=lambda f: -len(f[1]))

    def __bool__(self) -> bool:
        return bool(self._forms)

    def __len__(self) -> int:
        return len(self._forms)

    def __repr__(self) -> str:
        return f"Secrets({len(self._forms)} forms)"

    def __reduce__(self):
        raise TypeError("Secrets are not pickled")


def _as_secrets(values: Secrets | str | Secret | Iterable[str | Secret]) -> Secrets:
    if isinstance(values, Secrets):
        return values
    return Secrets([values] if isinstance(values, (str, Secret)) else values)  # a str is one value, not its chars


def scrub_text(text: str, secrets: Secrets | Iterable[str | Secret]) -> str:
    """``text`` with every registered form replaced by ``***`` (longest form first)."""
    for _, form in _as_secrets(secrets).forms():
        if form in text:
            text = text.replace(form, MASK)
    return text


def _scrub_bytes(data: bytes, secrets: Secrets) -> tuple[bytes, int]:
    n = 0
    for _, form in secrets.forms():
        b = form.encode()
        if b in data:
            n += data.count(b)
            data = data.replace(b, MASK.encode())
    return data, n


class RedactingFilter(logging.Filter):
    """A ``logging.Filter`` that replaces registered secrets in a record's message (arguments merged
    in), its exception text and its stack text by ``***``. Always lets the record through.

    Attach it to *handlers* (``handler.addFilter``): a logger's own filters do not see records that
    propagate from its children (the ``logging`` module's documented behaviour), a handler's do."""

    def __init__(self, secrets: Secrets) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the handler's to report
            return True
        clean = scrub_text(msg, self.secrets)
        if clean != msg:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_text(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = scrub_text(record.stack_info, self.secrets)
        return True


def scrub_file(path: Path, secrets: Secrets | Iterable[str | Secret]) -> int:
    """Replace every registered form in the file ``path`` by ``***``, in place (a temporary file in the
    same directory, then ``os.replace``; the mode is kept). A ``.gz`` file is decompressed, scrubbed and
    compressed again. Returns the number of replacements (0: the file is left untouched).

    Raises: ``OSError`` when the file cannot be read or written; ``gzip.BadGzipFile`` for a damaged ``.gz``.
    """
    path = Path(path)
    s = _as_secrets(secrets)
    gz = path.suffix == ".gz"
    data = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    clean, n = _scrub_bytes(data, s)
    if not n:
        return 0
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".scrub")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(clean) if gz else clean)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for d, _, names in os.walk(root):  # symbolic links to directories are not followed
        for n in sorted(names):
            p = Path(d) / n
            if p.is_file() and not p.is_symlink():
                yield p


CHUNK = 1 << 20


def _chunks(path: Path) -> Iterator[bytes]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk
    except (gzip.BadGzipFile, EOFError, OSError):
        if opener is open:
            raise
        with open(path, "rb") as f:  # a damaged or truncated .gz: search its raw bytes too
            while chunk := f.read(CHUNK):
                yield chunk


def find_secrets(run_dir: Path, values: Secrets | Iterable[str | Secret]) -> list[tuple[Path, str]]:
    """Every file under ``run_dir`` (or ``run_dir`` itself if it is a file) that contains a registered
    form of ``values``: ``[(path, form name)]`` (e.g. ``"value"``, ``"value/base64"``, ``"jaas"``), one
    entry per file and form, never the secret itself. ``.gz`` files are searched decompressed (a damaged
    one raw). Files are read in 1 MiB chunks with an overlap, so a form across a chunk boundary is found
    and memory does not follow file size. Symbolic links are not followed.

    Raises: ``OSError`` for a file that cannot be read.
    """
    forms = [(name, text.encode()) for name, text in _as_secrets(values).forms()]
    if not forms:
        return []
    overlap = max(len(b) for _, b in forms) - 1
    found: list[tuple[Path, str]] = []
    for path in _files(Path(run_dir)):
        hit: set[str] = set()
        tail = b""
        for chunk in _chunks(path):
            buf = tail + chunk
            for name, b in forms:
                if name not in hit and b in buf:
                    hit.add(name)
            tail = buf[-overlap:] if overlap else b""
        found.extend((path, name) for name, _ in forms if name in hit)
    return found


def check_secret_keys(mapping: Mapping, where: str = "") -> None:
    """The secrets rule (design §4.3) over a parsed configuration (nested mappings and lists, as
    ``tomllib`` returns): every key matching :data:`SECRET_KEY` must end in ``_env`` or ``_file``.

    Raises: :class:`SecretKeyError` naming the first offending ``where.key`` and the fix, e.g.
    ``kafka.security.password: a secret is not written in this file; put it in the environment:
    password_env = "ONCEPROOF_KAFKA_PASSWORD", or in a file only you can read: password_file = "<path>"``.
    """
    for key, value in mapping.items():
        full = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and SECRET_KEY.search(key) and not key.endswith(SECRET_KEY_SUFFIXES):
            var = "ONCEPROOF_" + re.sub(r"[^A-Za-z0-9]+", "_", full).upper()
            raise SecretKeyError(
                f"{full}: a secret is not written in this file; put it in the environment: "
                f'{key}_env = "{var}", or in a file only you can read: {key}_file = "<path>"')
        if isinstance(value, Mapping):
            check_secret_keys(value, full)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    check_secret_keys(item, f"{full}[{i}]")


def read_secret(mapping: Mapping, name: str, *, env: Mapping[str, str] | None = None,
                base_dir: Path | None = None, where: str = "") -> Secret | None:
    """The secret ``name`` of a configuration mapping, given as ``<name>_env`` (an environment
    variable's name, read from ``env``, default ``os.environ``) or ``<name>_file`` (a path, ``~``
    expanded, relative to ``base_dir``; its content without the trailing newline). ``None`` when
    neither key is there.

    Raises: ``ValueError`` naming ``where.<name>_env``/``_file`` when both are given, the variable is
    unset or empty, or the file cannot be read or is empty.
    """
    env = os.environ if env is None else env
    pre = f"{where}." if where else ""
    k_env, k_file = f"{name}_env", f"{name}_file"
    if k_env in mapping and k_file in mapping:
        raise ValueError(f"{pre}{k_env} and {pre}{k_file}: give one of them")
    if k_env in mapping:
        var = mapping[k_env]
        if not isinstance(var, str) or not var:
            raise ValueError(f"{pre}{k_env}: the name of an environment variable, e.g. ONCEPROOF_KAFKA_PASSWORD")
        value = env.get(var, "")
        if not value:
            raise ValueError(f"{pre}{k_env}: the environment variable {var} is not set (or empty); "
                             f"export {var}=... before the run")
        return Secret(value)
    if k_file in mapping:
        p = Path(str(mapping[k_file])).expanduser()
        if not p.is_absolute() and base_dir is not None:
            p = Path(base_dir) / p
        try:
            value = p.read_text().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"{pre}{k_file}: cannot read {p}: {e.strerror}") from None
        if not value:
            raise ValueError(f"{pre}{k_file}: {p} is empty")
        return Secret(value)
    return None
