"""The ``onceproof`` typer app and :func:`main`, the one entry point that turns every outcome into an exit code.

Exit codes (Jepsen's): 0 valid, 1 invalid, 2 unknown, 254 usage error (bad option or argument; one
line on stderr, nothing started), 255 crashed (one line on stderr naming the cause; the traceback goes
to a log file whose path that line gives).

A command reports a bad argument by raising :func:`usage` (or through :func:`finite` and
:func:`require_run_dir`), and names where its crash traceback goes with :func:`on_crash`. The commands
themselves live in the sibling modules and are registered on :data:`app` by the package ``__init__``.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

try:  # typer ≥ 0.22 vendors click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer on click
    from click.exceptions import UsageError

from onceproof.backends.base import BackendError
from onceproof.checking.checks import CheckError
from onceproof.clients.topics import TopicError
from onceproof.harness.config import ConfigError
from onceproof.store import runfiles, runs

__all__ = ["EXIT", "EXIT_CRASHED", "EXIT_USAGE", "UsageError", "app", "console", "finite", "main", "on_crash",
           "one_line", "require_run_dir", "usage"]

EXIT_USAGE, EXIT_CRASHED = 254, 255
EXIT = {"valid": 0, "invalid": 1, "unknown": 2, "crashed": EXIT_CRASHED}


class _App(typer.Typer):
    """The console script calls ``app()`` with no arguments: that goes through :func:`main` too, so the
    exit codes hold whether the entry point names ``onceproof.harness.cli:app`` or ``onceproof.harness.cli:main``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            sys.exit(main())
        return super().__call__(*args, **kwargs)


app = _App(add_completion=False, no_args_is_help=True,
           help="Prove a PySpark streaming pipeline from Kafka to Kafka, files, Delta Lake, Apache Iceberg or "
                "PostgreSQL delivers every record exactly once while executors, "
                "drivers and brokers fail. Exit codes: 0 valid, 1 invalid, 2 unknown, 254 usage error, "
                "255 crashed.")
console = Console(width=None if sys.stdout.isatty() else 120)

# Where the current command's crash traceback goes: a path, or a function giving one (None: a temp file).
_crash: dict[str, Any] = {"cmd": "onceproof", "log": None}


def on_crash(cmd: str, log: Path | Callable[[], Path | None] | None) -> None:
    """From now on a crash names ``onceproof <cmd>`` and writes its traceback to ``log`` (a path, a function
    giving one, or ``None``: a temp file)."""
    _crash.update(cmd=f"onceproof {cmd}", log=log)


def usage(message: str, option: str | None = None) -> typer.BadParameter:
    """A usage error (exit 254) for ``option``, to raise."""
    return typer.BadParameter(message, param_hint=option)


def finite(value: float, option: str, lo: float = 0.0, lo_open: bool = True) -> None:
    """Raises a usage error (254) unless ``value`` is finite and above ``lo`` (at least ``lo`` if not ``lo_open``)."""
    if not math.isfinite(value) or (value <= lo if lo_open else value < lo):
        raise usage(f"must be a finite number {'>' if lo_open else '≥'} {lo:g}, got {value}", option)


def require_run_dir(run_dir: Path) -> Path:
    """``run_dir`` resolved, if it is a run directory. Raises a usage error (254) saying what it is instead."""
    if not run_dir.exists():
        raise usage(f"{run_dir} does not exist", "RUN_DIR")
    if not run_dir.is_dir():
        raise usage(f"{run_dir} is not a directory", "RUN_DIR")
    if not runs.is_run_dir(run_dir):
        hint = f"; did you mean {run_dir / runs.LATEST}?" if runs.is_run_dir(run_dir / runs.LATEST) else \
            " (e.g. results/latest)"
        raise usage(f"{run_dir} is not a run directory: it has none of {', '.join(runfiles.MARKERS)}; give a "
                    f"run's directory{hint}", "RUN_DIR")
    return run_dir.resolve()


def one_line(text: object, limit: int = 600) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    0 valid, 1 invalid, 2 unknown (from ``run`` / ``check``; other commands 0 on success), 254 usage
    error: one line on stderr, 255 crashed: one line on stderr naming the cause and the file holding the
    traceback (``<run_dir>/logs/<command>-error.log`` when there is a writable run directory, else a
    temp file). Ctrl-C outside a run's own handling also gives 255 ("interrupted").
    """
    args = sys.argv[1:] if argv is None else list(argv)
    _crash.update(cmd="onceproof", log=None)
    try:
        rv = typer.Typer.__call__(app, args=args, prog_name="onceproof", standalone_mode=False)
    except UsageError as e:
        return _usage_exit(e)
    except Exception as e:  # noqa: BLE001 - every crash: one line, the traceback in a file
        return _crash_exit(e, args)
    except KeyboardInterrupt:
        print(f"{_crash['cmd']}: interrupted", file=sys.stderr)
        return EXIT_CRASHED
    if rv == 130:  # typer turns Ctrl-C into Exit(130)
        print(f"{_crash['cmd']}: interrupted", file=sys.stderr)
        return EXIT_CRASHED
    return rv if isinstance(rv, int) else 0


def _usage_exit(e: UsageError) -> int:
    ctx = getattr(e, "ctx", None)
    if type(e).__name__ == "NoArgsIsHelpError":  # the help is the message (typer's rich help prints itself)
        if e.format_message().strip():
            print(e.format_message())
        return EXIT_USAGE
    cmd = ctx.command_path if ctx is not None else "onceproof"
    print(f"{cmd}: {one_line(e.format_message())} (see `{cmd} --help`)", file=sys.stderr)
    return EXIT_USAGE


def _crash_exit(e: BaseException, args: list[str]) -> int:
    text = (f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} onceproof {shlex.join(args)}\n"
            + "".join(traceback.format_exception(e)))
    where = _write_crash_log(text)
    own = isinstance(e, (CheckError, BackendError, TopicError, ConfigError))
    cause = str(e) if own and str(e) else f"{type(e).__name__}: {e}"
    print(f"{_crash['cmd']}: crashed: {one_line(cause)} (traceback: {where})", file=sys.stderr)
    return EXIT_CRASHED


def _write_crash_log(text: str) -> Path:
    pref = _crash["log"]
    try:
        pref = pref() if callable(pref) else pref
    except Exception:  # noqa: BLE001 - fall back to a temp file
        pref = None
    if pref is not None:
        try:
            Path(pref).parent.mkdir(parents=True, exist_ok=True)
            with open(pref, "a") as f:
                f.write(text)
            return Path(pref)
        except OSError:
            pass
    fd, name = tempfile.mkstemp(prefix=f"{_crash['cmd'].replace(' ', '-')}-error-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)
