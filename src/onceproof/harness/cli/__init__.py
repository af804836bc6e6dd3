"""``onceproof``: the command line (Jepsen's ``jepsen.cli``), one module per command group.

Commands: ``run`` (a whole test), ``check`` (a stored run, or any pipeline's live topics), ``report``,
``index``, ``prune`` (delete old runs), ``serve``, ``test-all`` (a matrix and its certificate),
``shrink`` (a failing schedule cut down), ``faults``, ``deps`` (resolve the jars ahead of time),
``cluster`` (``up`` / ``status`` / ``down``: a bare Kafka cluster), ``session`` (``start`` / ``status`` /
``stop``: an ad hoc chaos session) with ``nemesis`` and ``heal`` (faults by hand) and ``watch`` (its live
view), ``ssh`` (``trust`` / ``check``: the nodes of ``--backend ssh``), ``external`` (``check``: a
``cluster.toml``). ``run``, ``session
start`` and the ``cluster`` commands take ``--backend`` (``backends/registry.py``).

Modules: :mod:`.app` (the typer app, :func:`main` and its exit codes, usage and crash handling),
:mod:`.run`, :mod:`.check`, :mod:`.results` (``report``, ``index``, ``prune``, ``serve``), :mod:`.suite`
(``test-all``, ``shrink``), :mod:`.catalog` (``faults``), :mod:`.cluster` (``cluster``, ``deps``),
:mod:`.session` (``session``, ``nemesis``, ``heal``, ``watch``), :mod:`.ssh` (``ssh``), :mod:`.external`
(``external``).
This module registers the commands on the app, in the order ``onceproof --help`` lists them.

Exit codes (Jepsen's): 0 valid, 1 invalid, 2 unknown, 254 usage error (bad option or argument; one
line on stderr, nothing started), 255 crashed (one line on stderr naming the cause; the traceback goes
to a log file whose path that line gives). Every entry point goes through :func:`main`: the console
script (``onceproof = "onceproof.harness.cli:main"``) and ``python -m onceproof.harness.cli``.
"""

from __future__ import annotations

from onceproof.harness.cli import catalog, check, cluster, external, results, run, session, ssh, suite
from onceproof.harness.cli.app import EXIT, EXIT_CRASHED, EXIT_USAGE, UsageError, app, main
from onceproof.harness.cli.run import config_from_options, parse_run_args

__all__ = ["EXIT", "EXIT_CRASHED", "EXIT_USAGE", "UsageError", "app", "config_from_options", "main",
           "parse_run_args"]

# the order of `onceproof --help` (a group comes after the commands, whatever its place here)
app.command("run")(run.run)
app.command()(check.check)
app.command()(results.report)
app.command()(results.index)
app.command()(results.prune)
app.command()(results.serve)
app.command("test-all", context_settings=suite.TEST_ALL_CONTEXT)(suite.test_all)
app.command()(suite.shrink)
app.command()(catalog.faults)
app.command()(cluster.deps)
app.command()(session.nemesis)
app.command()(session.heal)
app.command()(session.watch)
app.add_typer(cluster.cluster_app, name="cluster")
app.add_typer(session.session_app, name="session")
app.add_typer(ssh.ssh_app, name="ssh")
app.add_typer(external.external_app, name="external")
