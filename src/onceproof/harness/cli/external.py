"""``onceproof external check``: a ``cluster.toml`` (``--backend external``, see
``backends/external/cluster_file.py``) read, checked and explained before any run.

It prints the cluster's bootstrap and security protocol (never a secret), the faults the fault map makes
possible, and every command a run of ``--nemesis`` would execute on the cluster, rendered by the code a
run uses (``backends/external/dry_run.py``). It executes nothing, connects to nothing and creates
nothing. Exit 0, or 254 naming the key to fix.
"""

from __future__ import annotations

from pathlib import Path

import typer

from onceproof.harness.cli.app import console, on_crash, usage

external_app = typer.Typer(no_args_is_help=True,
                           help="A cluster onceproof does not own (cluster.toml, --backend external): check.")


@external_app.command("check")
def check(cluster: Path = typer.Option(..., "--cluster", help="the cluster file (examples/cluster.toml shows one)"),
          nemesis: str = typer.Option("", "--nemesis", help="faults to render, as for `run` (default: every fault "
                                      "family the map holds)"),
          run_id: str = typer.Option("0123456789ab", "--run-id", help="the run id the names are rendered with")
          ) -> None:
    """Check a cluster.toml and print every command a run would execute on the cluster (runs none)."""
    from onceproof.backends.base import can_perform
    from onceproof.backends.external.cluster_file import ClusterFileError, load
    from onceproof.backends.external.dry_run import describe
    from onceproof.backends.external.fault_map import FaultMapError
    from onceproof.nemesis import catalog
    on_crash("external check", None)
    try:
        cf = load(cluster)
    except ClusterFileError as e:
        raise usage(str(e), "--cluster") from None
    possible = cf.faults.specs()
    if nemesis:
        try:
            specs = catalog.parse(nemesis)
        except ValueError as e:
            raise usage(str(e), "--nemesis") from None
    else:
        specs = sorted({s.partition(":")[0] for s in possible})
    missing = [s for s in specs if not all(can_perform(possible, x) for x in catalog.expand(s))]
    if missing:
        raise usage(f"{', '.join(missing)}: not in the fault map of {cluster}; add [faults.<name>] with run and "
                    f"heal commands (it maps: {', '.join(sorted(possible)) or 'nothing'})", "--nemesis")
    try:
        lines = describe(cf, specs, run_id)
    except FaultMapError as e:
        raise usage(str(e), "--cluster") from None
    console.print(f"possible faults: {', '.join(sorted(possible)) or '(none mapped)'}", soft_wrap=True,
                  highlight=False, markup=False)
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
