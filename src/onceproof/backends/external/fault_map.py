"""The fault map of ``--backend external``: for each fault onceproof may inject into a cluster it does not
own, the user's command that injects it and the command that heals it (issue 28, design §4.2).

A map is the ``[faults.<key>]`` tables of ``cluster.toml``::

    [faults.kill-broker]
    run  = "docker compose -p {project} kill -s KILL kafka{broker_id}"
    heal = "docker compose -p {project} start kafka{broker_id}"
    where = "local"          # or "ssh:user@host": run through SSH on that machine
    timeout_s = 60           # the command's deadline, seconds
    shell = false            # true: run through ``sh -c`` (pipes, ``&&``); false: split like a shell, no shell

Keys (:data:`ENTRY_KEYS`) are fault names of ``nemesis/catalog.py`` the harness can drive from outside,
plus the helper ``pause-driver`` (a driver SIGSTOP/SIGCONT, which together with ``kill-driver`` makes
``kill-driver-in-commit-window`` possible: the window is held by pausing the driver, then killed).
:meth:`FaultMap.specs` is what a run may plan with this map; a fault outside it is refused before
anything starts, the rule every backend follows (``backends/capabilities.py``).

Placeholders (``{name}``): the built-ins of :data:`PLACEHOLDERS` for the key, the ``[vars]`` table,
and for broker faults the fields of ``[kafka.brokers.<broker_id>]``. Every template is checked when
the file is read (:func:`string.Formatter.parse`), so a misspelt name fails before the run, naming
the key. Values are ``shlex.quote``-d before they are put in, so a value is always one argument.

Pure: nothing here runs a command. The runner for a rendered :class:`Command` (local or over SSH) and
the pending-heal ledger are separate modules.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field

BROKER = ("broker_id", "host", "port")
"""Placeholders of a broker fault: the broker's ``node.id``, and its host and port as Kafka's metadata
gives them (what the harness's clients connect to)."""
DRIVER = ("incarnation", "driver_pid")
"""Placeholders of a driver fault: the supervisor's incarnation number (1, 2, ...; the name the
``[spark] submit`` template gave that driver) and the driver's pid where the submit command is a local child."""
EXECUTOR = ("executor_id", "executor_host")
"""Placeholders of an executor fault: Spark's executor id and host, from the application's REST API."""
COMMON = ("run_id", "prefix")
"""Placeholders of every template: the run's id and its name prefix (``<topic_prefix><run8>-``)."""

PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    "kill-broker": COMMON + BROKER,
    "pause-broker": COMMON + BROKER,
    "bounce-broker": COMMON + BROKER,
    "kill-driver": COMMON + DRIVER,
    "pause-driver": COMMON + DRIVER,
    "kill-executor": COMMON + EXECUTOR,
}
"""The built-in placeholders each key's templates may use."""

ENTRY_KEYS = tuple(PLACEHOLDERS)
"""The keys a ``[faults]`` table may hold."""

SPEC_OF = {"kill-broker": "kill-broker:*", "pause-broker": "pause-broker:*", "bounce-broker": "bounce-broker:*",
           "kill-driver": "kill-driver", "kill-executor": "kill-executor"}
"""The fault spec each key makes possible (``pause-driver`` makes none alone)."""
COMMIT_WINDOW = "kill-driver-in-commit-window"
"""The fault ``kill-driver`` and ``pause-driver`` make possible together (the window held by a pause)."""

HEAL_REQUIRED = ("pause-broker", "pause-driver")
"""Keys whose fault must be undone by the map (a paused process stays paused): ``heal`` is required.
A killed broker needs ``heal`` too unless the cluster restarts it by itself; that is checked by the
harness (the broker must rejoin), not here."""

WHERE = re.compile(r"local|ssh:(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._:-]+")
"""``where`` values: ``local`` (the harness's machine) or ``ssh:[user@]host``."""

ENTRY_FIELDS = ("run", "heal", "where", "timeout_s", "shell")


class FaultMapError(ValueError):
    """A ``[faults]`` table that cannot be used; the message starts with ``<where>.<key>`` and names the fix."""


@dataclass(frozen=True)
class Command:
    """One rendered command: ``argv`` to execute on ``where`` within ``timeout_s`` seconds (0: no
    deadline, for a command that lives as long as what it started, e.g. a driver's submit)."""

    argv: tuple[str, ...]
    where: str = "local"
    timeout_s: float = 60.0

    def display(self) -> str:
        """``[where] $ argv`` as a shell would read it (what ``--dry-run`` prints)."""
        return f"[{self.where}] $ {shlex.join(self.argv)}"


@dataclass(frozen=True)
class FaultEntry:
    """One ``[faults.<key>]`` table.

    Attributes:
        key: one of :data:`ENTRY_KEYS`.
        run / heal: templates; ``heal`` ``None`` when the fault needs no undo (a killed driver: the
            supervisor starts the next incarnation).
        where: ``local`` or ``ssh:[user@]host``.
        timeout_s: each command's deadline, seconds.
        shell: run through ``sh -c`` instead of being split into argv.
    """

    key: str
    run: str
    heal: str | None = None
    where: str = "local"
    timeout_s: float = 60.0
    shell: bool = False

    def command(self, template: str, values: Mapping[str, object]) -> Command:
        """``template`` rendered with ``values`` into a :class:`Command` (:func:`render`).

        Raises: :class:`FaultMapError` when a placeholder has no value."""
        return Command(argv=render(template, values, shell=self.shell, where=f"faults.{self.key}"), where=self.where,
                       timeout_s=self.timeout_s)


def render(template: str, values: Mapping[str, object], *, raw: Mapping[str, str] | None = None, shell: bool = False,
           where: str = "template") -> tuple[str, ...]:
    """``template`` with each of ``values`` ``shlex.quote``-d in (so a value is always one argument) and each of
    ``raw`` put in as it is (text already joined for a shell, e.g. the job's arguments), then split into argv
    like a shell would, or ``("sh", "-c", text)`` with ``shell``.

    Raises: :class:`FaultMapError` naming ``where`` when a placeholder has no value."""
    quoted = {k: shlex.quote(str(v)) for k, v in values.items()}
    try:
        text = template.format_map({**quoted, **(raw or {})})
    except KeyError as e:
        raise FaultMapError(f"{where}: no value for {{{e.args[0]}}} (given: {', '.join(sorted(values))})") from None
    return ("sh", "-c", text) if shell else tuple(shlex.split(text))


def placeholders(template: str, where: str) -> set[str]:
    """The ``{name}`` placeholders of ``template``. Raises: :class:`FaultMapError` naming ``where`` for a
    broken template or a placeholder with a conversion, a format spec or a non-identifier name."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise FaultMapError(f"{where}: not a template ({e}); write {{name}} for a value and {{{{ }}}} for a "
                            "literal brace") from None
    out = set()
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conv:
            raise FaultMapError(f"{where}: {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}: "
                                "only plain {name} placeholders are allowed")
        out.add(name)
    return out


@dataclass(frozen=True)
class FaultMap:
    """The parsed ``[faults]`` tables, by key, with the names the templates may use.

    Attributes:
        entries: ``{key: FaultEntry}``.
        variables: ``[vars]`` (user-defined placeholders, available to every template).
        broker_fields: the union of the ``[kafka.brokers.<id>]`` fields (available to broker faults).
    """

    entries: Mapping[str, FaultEntry] = field(default_factory=dict)
    variables: Mapping[str, str] = field(default_factory=dict)
    broker_fields: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, table: Mapping, *, variables: Mapping[str, str] | None = None,
              broker_fields: frozenset[str] = frozenset(), where: str = "faults") -> FaultMap:
        """A :class:`FaultMap` from the parsed ``[faults]`` table.

        Raises: :class:`FaultMapError` for an unknown key or field, a missing ``run``, a missing
        ``heal`` where :data:`HEAL_REQUIRED`, a bad ``where``/``timeout_s``/``shell``, or a template
        naming a placeholder that is neither built in for that key, nor in ``[vars]``, nor (broker
        faults) a ``[kafka.brokers]`` field.
        """
        variables = dict(variables or {})
        entries: dict[str, FaultEntry] = {}
        for key, t in table.items():
            w = f"{where}.{key}"
            if key not in PLACEHOLDERS:
                raise FaultMapError(f"{w}: no such fault for the external backend; a map may hold "
                                    f"{', '.join(ENTRY_KEYS)}")
            if not isinstance(t, Mapping):
                raise FaultMapError(f'{w}: expected a table: [faults.{key}] with run = "..." (and heal = "...")')
            bad = sorted(set(t) - set(ENTRY_FIELDS))
            if bad:
                raise FaultMapError(f"{w}.{bad[0]}: unknown field; known: {', '.join(ENTRY_FIELDS)}")
            run, heal = t.get("run"), t.get("heal")
            if not isinstance(run, str) or not run.strip():
                raise FaultMapError(f'{w}.run: required, the command that injects the fault, e.g. '
                                    f'"docker kill ..."')
            if heal is not None and (not isinstance(heal, str) or not heal.strip()):
                raise FaultMapError(f"{w}.heal: a command, or leave it out")
            if heal is None and key in HEAL_REQUIRED:
                raise FaultMapError(f"{w}.heal: required: a {key} must be undone (e.g. unpause) at its heal "
                                    "and on every exit path")
            loc = t.get("where", "local")
            if not isinstance(loc, str) or not WHERE.fullmatch(loc):
                raise FaultMapError(f'{w}.where: "local" or "ssh:user@host", got {loc!r}')
            timeout = t.get("timeout_s", 60)
            if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 3600:
                raise FaultMapError(f"{w}.timeout_s: seconds between 0 and 3600, got {timeout!r}")
            shell = t.get("shell", False)
            if not isinstance(shell, bool):
                raise FaultMapError(f"{w}.shell: true or false, got {shell!r}")
            allowed = set(PLACEHOLDERS[key]) | set(variables)
            if key.endswith("-broker"):
                allowed |= broker_fields
            for part, text in (("run", run), ("heal", heal)):
                if text is None:
                    continue
                unknown = sorted(placeholders(text, f"{w}.{part}") - allowed)
                if unknown:
                    raise FaultMapError(f"{w}.{part}: unknown placeholder {{{unknown[0]}}}; this fault knows "
                                        f"{', '.join('{' + n + '}' for n in sorted(allowed))} (add others "
                                        "under [vars])")
            entries[key] = FaultEntry(key=key, run=run, heal=heal, where=loc, timeout_s=float(timeout),
                                      shell=shell)
        return cls(entries=entries, variables=variables, broker_fields=broker_fields)

    def specs(self) -> frozenset[str]:
        """The fault specs a run may plan with this map, in the forms of ``backends/capabilities.NEEDS``:
        a broker fault as ``<name>:*`` (the harness picks the broker, so every target), a driver fault by
        name. ``kill-driver`` with ``pause-driver`` adds ``kill-driver-in-commit-window``; ``pause-driver``
        alone is no fault of the catalog."""
        out = {SPEC_OF[key] for key in self.entries if key in SPEC_OF}
        if {"kill-driver", "pause-driver"} <= set(self.entries):
            out.add(COMMIT_WINDOW)
        return frozenset(out)

    def entry(self, key: str) -> FaultEntry:
        """The entry for ``key``. Raises: :class:`FaultMapError` naming the table to add."""
        try:
            return self.entries[key]
        except KeyError:
            raise FaultMapError(f"faults.{key}: the fault map has no entry; add [faults.{key}] with its run "
                                "and heal commands to cluster.toml") from None

    def values(self, key: str, builtins: Mapping[str, object],
               broker: Mapping[str, object] | None = None) -> dict[str, object]:
        """What a template of ``key`` is rendered with: ``[vars]``, then the broker's ``[kafka.brokers]``
        fields, then the built-ins (which win)."""
        return {**self.variables, **(broker or {}), **builtins}

    def run(self, key: str, values: Mapping[str, object]) -> Command:
        """The rendered ``run`` command of ``key``. Raises: :class:`FaultMapError`."""
        e = self.entry(key)
        return e.command(e.run, values)

    def heal(self, key: str, values: Mapping[str, object]) -> Command | None:
        """The rendered ``heal`` command of ``key``, ``None`` when it has none. Raises: :class:`FaultMapError`."""
        e = self.entry(key)
        return None if e.heal is None else e.command(e.heal, values)
