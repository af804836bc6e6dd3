"""Check engines by name: what ``onceproof check --engine`` chooses from.

An engine runs the whole check of a stored run (``check_saved``) or of live topics after the
caught-up wait (``check_live``) and returns the result dict of ``checking/checks.py`` (verdict,
counts, anomalies with examples, stats), so the console summary, ``results.json``, the report and the
exit code do not depend on the engine. ``refusal`` says, before anything starts, why the engine cannot
check a run: the CLI turns it into a usage error (exit 254).

* ``pandas`` (default): ``checking/checks.py``, in this process's memory (``bench/README.md``: about
  10 M records on a 24 GiB machine).
* ``spark``: ``checking/spark/checks.py``, Spark jobs on ``--spark-master``.

Each entry names the engine as ``module:attribute``, imported only when chosen (pandas never imports
pyspark). A new engine is one module and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from onceproof.registry import Registry

ENGINES: dict[str, str] = {
    "pandas": "onceproof.checking.engines:PANDAS",
    "spark": "onceproof.checking.spark.checks:ENGINE",
}
DEFAULT = "pandas"


@dataclass(frozen=True)
class Options:
    """Engine settings from the command line.

    Attributes:
        spark_master: Spark master URL (``local[2]``, ``spark://host:7077``, ``yarn``, ...).
        spark_conf: extra Spark settings (``--spark-conf KEY=VALUE``), e.g. ``spark.driver.memory``.
        bootstrap: with a run directory: read its topics from this cluster when it has no snapshots.
        input_topic, output_topic: the topics ``bootstrap`` names.
    """

    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    bootstrap: str = ""
    input_topic: str = "input"
    output_topic: str = "output"


class Engine(Protocol):
    """One check engine.

    Attributes:
        name: what ``--engine`` calls it.
        summary: one line for ``--help``.
        reads_topics_for_run_dir: whether ``check RUN_DIR --bootstrap`` means "read the topics of a run
            directory that has no snapshots" (otherwise RUN_DIR and ``--bootstrap`` exclude each other).
    """

    name: str
    summary: str
    reads_topics_for_run_dir: bool

    def refusal(self, run_dir: Path | None, *, workload: str, file_sink: Path | None, file_read: str) -> str | None:
        """Why this engine cannot check ``run_dir`` (or, with ``None``, the live topics described by the
        other arguments): one line naming the fix; ``None`` when it can."""

    def check_saved(self, run_dir: Path, *, file_read: str | None, options: Options) -> dict:
        """``onceproof.checking.checks.check_saved``'s contract. Raises ``onceproof.checking.checks.CheckError``."""

    def check_live(self, bootstrap: str, input_topic: str, output_topic: str, run_dir: Path, st, *,
                   workload: str, file_sink: Path | None, file_read: str, options: Options) -> dict:
        """``onceproof.checking.checks.check_live``'s contract (``st``:
        ``onceproof.checking.recovery.RecoveryStatus``)."""


class PandasEngine:
    """``checking/checks.py``: every check on pandas frames in this process."""

    name = "pandas"
    summary = "pandas in this process (the default)"
    reads_topics_for_run_dir = False

    def refusal(self, run_dir: Path | None, **_) -> str | None:
        return None

    def check_saved(self, run_dir: Path, *, file_read: str | None = None, options: Options | None = None) -> dict:
        # lazy: checks loads pandas; listing the engines (the CLI's --engine) must not
        from onceproof.checking import checks as checking

        return checking.check_saved(run_dir, file_read=file_read)

    def check_live(self, bootstrap: str, input_topic: str, output_topic: str, run_dir: Path, st, *,
                   workload: str = "keyed", file_sink: Path | None = None, file_read: str = "committed",
                   options: Options | None = None) -> dict:
        # lazy: checks loads pandas; listing the engines (the CLI's --engine) must not
        from onceproof.checking import checks as checking

        return checking.check_live(bootstrap, input_topic, output_topic, run_dir, st, workload=workload,
                                   file_sink=file_sink, file_read=file_read)


PANDAS = PandasEngine()


_REGISTRY = Registry("engine", ENGINES)
names = _REGISTRY.names


def get(name: str) -> Engine:
    """The engine called ``name``.

    Raises: ``ValueError`` naming the known engines when ``name`` is not one of them.
    """
    return _REGISTRY.get(name)
