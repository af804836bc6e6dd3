"""What ``--backend external --dry-run`` prints: every command a run with these faults would execute on
the user's cluster, rendered by the same code the real path uses (``fault_map``), and the topics it
would create and delete (issue 28, design §4.4). Nothing here executes, connects or creates anything.

Values the harness learns only while running are shown as ``<name>`` (``<incarnation>``,
``<executor_id>``); a broker fault is rendered once per broker of ``[kafka.brokers]``, since the
harness picks the broker at each turn (a leader, the transaction coordinator, ...).
"""

from __future__ import annotations

from collections.abc import Iterable

from onceproof.backends.external.cluster_file import ClusterFile
from onceproof.backends.external.fault_map import COMMIT_WINDOW, DRIVER, EXECUTOR, FaultMapError

SPEC_KEYS = {COMMIT_WINDOW: ("pause-driver", "kill-driver")}
"""Faults that use several map entries, in the order they run (the window is held by a pause, then the
driver is killed while paused)."""


def keys_of(spec: str) -> tuple[str, ...]:
    """The fault-map keys one turn of ``spec`` runs (``kill-broker:leader`` → ``("kill-broker",)``)."""
    name = spec.partition(":")[0]
    return SPEC_KEYS.get(name, (name,))


def _placeholders(names: Iterable[str]) -> dict[str, str]:
    return {n: f"<{n}>" for n in names}


def describe(cf: ClusterFile, specs: list[str], run_id: str) -> list[str]:
    """The lines ``--dry-run`` prints for a run of ``specs`` with id ``run_id``: the topics, then per
    spec each rendered ``run`` and ``heal``, then teardown.

    Raises: :class:`FaultMapError` naming the first spec the map cannot run (the real run refuses it too)."""
    names = cf.topic_names(run_id)
    prefix = cf.run_prefix(run_id)
    out = [f"# cluster {cf.path}: bootstrap {cf.kafka.bootstrap}, security {cf.kafka.security.protocol}",
           f"create topics: {', '.join(names.all())}"]
    common = {"run_id": run_id, "prefix": prefix}
    submit = cf.spark.submit_command({**cf.variables, **common, "incarnation": "<incarnation>"}, ["<job arguments>"])
    out.append("driver (each incarnation): " + submit.display())
    for spec in specs:
        out.append(f"# {spec}")
        for key in keys_of(spec):
            targets: list[dict[str, object]]
            if key.endswith("-broker"):
                if not cf.kafka.brokers:
                    raise FaultMapError(f"faults.{key}: [kafka.brokers] lists no broker to render it for")
                targets = [cf.faults.values(key, {**common, "broker_id": bid, "host": info.get("host", "<host>"),
                                                  "port": info.get("port", "<port>")}, broker=info)
                           for bid, info in sorted(cf.kafka.brokers.items())]
            elif key.endswith("-driver"):
                targets = [cf.faults.values(key, {**common, **_placeholders(DRIVER)})]
            else:
                targets = [cf.faults.values(key, {**common, **_placeholders(EXECUTOR)})]
            for values in targets:
                out.append("run:  " + cf.faults.run(key, values).display())
                heal = cf.faults.heal(key, values)
                if heal is not None:
                    out.append("heal: " + heal.display())
    out.append(f"delete topics: {', '.join(names.all())} (only these; created by this run)")
    return out
