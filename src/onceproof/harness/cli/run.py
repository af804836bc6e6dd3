"""``onceproof run``: one whole test on a fresh cluster, its options built from :class:`TestConfig`.

Every :class:`TestConfig` field is one option (:func:`run_signature`); :func:`config_from_options` turns
the parsed options into a validated config and :func:`parse_run_args` parses a replay command's options
with this same parser. A run logs to the console (warnings, or everything with ``--verbose``) and,
tracebacks included, to the run directory's ``logs/harness.log``.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any

import typer

from onceproof.harness import signals
from onceproof.harness.cli.app import app, console, on_crash, one_line, usage
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.harness.runner import run as run_test
from onceproof.store.runfiles import RunFiles


def run(**options: Any) -> None:
    """Run one test on a fresh cluster (of --backend) and print the verdict.

    Every option is validated before anything starts.

    Exit code: 0 valid, 1 invalid, 2 unknown, 254 usage error, 255 crashed.
    """
    verbose = options.pop("verbose", False)
    dry = options.pop("dry_run", False)
    on_crash("run", _run_error_log)
    os.environ.pop("ONCEPROOF_RUN", None)  # set by the runner once the run directory exists
    cfg = config_from_options(options)
    if dry:
        _dry_run(cfg)
        raise typer.Exit(0)
    _configure_run_logging(verbose)
    signals.install()
    code, _ = run_test(cfg, console)
    raise typer.Exit(code)


def _dry_run(cfg: TestConfig) -> None:
    """Print every command a run of ``cfg`` would execute on the cluster (a :class:`DryRun` backend's list);
    nothing is started. Raises: ``typer.BadParameter`` (254) for a backend that owns its cluster."""
    from onceproof.backends.base import BackendError, DryRun

    try:
        backend = cfg.backend_instance()
    except ConfigError as e:
        raise usage(e.message, e.option) from None
    if not isinstance(backend, DryRun):
        raise usage(f"--dry-run lists the commands run on a cluster onceproof does not own (--backend external); "
                    f"--backend {cfg.backend} builds its own cluster (for ssh nodes: `onceproof ssh check`)",
                    "--dry-run")
    try:
        lines = backend.dry_run(list(cfg.nemesis))
    except BackendError as e:
        raise usage(str(e), "--nemesis") from None
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False, markup=False)


def config_from_options(options: dict[str, Any]) -> TestConfig:
    """``run``'s parsed options (field name → value) as a validated config.

    Raises: ``typer.BadParameter`` (exit 254) naming the option.
    """
    try:
        return TestConfig.from_cli(options).validate()
    except ConfigError as e:
        raise usage(e.message, e.option) from None


def run_signature() -> inspect.Signature:
    """``run``'s parameters: one option per :class:`TestConfig` field, plus ``--verbose``."""
    hints = typing.get_type_hints(TestConfig)
    params = []
    for f in TestConfig.options():
        typ, default = hints[f.name], TestConfig.default_of(f)
        if f.metadata.get("fmt"):
            typ, default = str, f.metadata["fmt"](default)
        flag = TestConfig.flag(f)
        decls = [f"{flag}/--no-{flag[2:]}"] if typ is bool else [flag]
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=typ,
                                        default=typer.Option(default, *decls, help=f.metadata.get("help"))))
    params.append(inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                    default=typer.Option(False, "--verbose", "-v", help="log harness internals")))
    params.append(inspect.Parameter("dry_run", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                    default=typer.Option(False, "--dry-run", help="print every command the run "
                                                         "would execute on the cluster, run none (--backend "
                                                         "external)")))
    return inspect.Signature(params)


run.__signature__ = run_signature()  # type: ignore[attr-defined]
run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}  # type: ignore


def parse_run_args(argv: list[str]) -> TestConfig:
    """Parse ``run``'s options (without ``onceproof run``) with this CLI's parser; not validated.

    Raises: ``UsageError`` for an unknown option or a malformed value, ``ConfigError`` for an
    unparseable fault list.
    """
    cmd = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    ctx = cmd.make_context("onceproof run", list(argv))
    params = dict(ctx.params)
    params.pop("verbose", None)
    params.pop("dry_run", None)
    return TestConfig.from_cli(params)


# ------------------------------------------------------------------------------------------------ logging


class _ConsoleFormatter(logging.Formatter):
    """One line per record: a traceback is replaced by where the run's log file keeps it."""

    def format(self, record: logging.LogRecord) -> str:
        s = f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            s += f": {one_line(record.exc_info[1])} (traceback in {_RunLog.where()})"
        return s


class _RunLog(logging.Handler):
    """Every harness log record, tracebacks included, to ``$ONCEPROOF_RUN/logs/harness.log`` (the run
    directory the runner announces), or to a temp file before there is one."""

    _path: Path | None = None

    @classmethod
    def where(cls) -> Path:
        run = os.environ.get("ONCEPROOF_RUN")
        if run and (cls._path is None or cls._path.parent.parent != Path(run)):
            cls._path = RunFiles(run).harness_log
        if cls._path is None:
            fd, name = tempfile.mkstemp(prefix="onceproof-run-", suffix=".log")
            os.close(fd)
            cls._path = Path(name)
        return cls._path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            p = self.where()
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a") as f:
                f.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must not break the run
            self.handleError(record)


def _configure_run_logging(verbose: bool) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    con = logging.StreamHandler(sys.stderr)
    con.setLevel(logging.INFO if verbose else logging.WARNING)
    con.setFormatter(_ConsoleFormatter())
    fh = _RunLog(level=logging.INFO)
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(con)
    root.addHandler(fh)
    root.setLevel(logging.INFO)


def _run_error_log() -> Path | None:
    run = os.environ.get("ONCEPROOF_RUN")
    return RunFiles(run).error_log("run") if run else None
