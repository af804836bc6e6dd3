"""A user's own pipeline under test: ``onceproof run --pipeline-cmd 'CMD'``.

``CMD`` is a command line, split like a POSIX shell would (``shlex``) but never run through one, whose
words may hold the placeholders of :data:`PLACEHOLDERS` in ``str.format`` syntax, e.g.::

    {python} examples/user_pipeline.py --bootstrap {bootstrap} --input-topic {input_topic}
        --output-topic {output_topic} --checkpoint {checkpoint} --jars {jars}

The harness expands it once per driver incarnation with the same values (a restart reuses the
checkpoint, so the restarted query resumes from the offset log). A literal brace is doubled (``{{``).
The contract the command must keep is ``docs/pipeline-contract.md``.
"""

from __future__ import annotations

import re
import shlex
import string
from dataclasses import dataclass
from pathlib import PurePath

PLACEHOLDERS: dict[str, str] = {
    "python": "the project's Python interpreter (the one with pyspark and confluent-kafka)",
    "bootstrap": "Kafka bootstrap servers, host:port[,host:port...]",
    "input_topic": "the topic the workload writes",
    "output_topic": "the topic the checker reads at read_committed",
    "checkpoint": "the run's Spark checkpoint directory (the same for every restart)",
    "master": "the Spark master URL (local-cluster[...] or spark://...)",
    "jars": "Spark's Kafka connector classpath, comma-separated, for spark.jars",
    "output_path": "--output files or delta: the directory the job's file sink or Delta table writes",
    "postgres_dsn": "--output postgres: the libpq connection string of the run's PostgreSQL database",
    "output_table": "--output postgres or iceberg: the table the job writes (postgres: named like the output "
                    "topic; iceberg: <catalog>.<namespace>.<table>, onceproof.db.output)",
    "iceberg_conf": "--output iceberg: a JSON object of the Spark settings that define the catalog (its "
                    "spark.sql.catalog.<name> keys and spark.sql.extensions); apply each with "
                    "SparkSession.builder.config(key, value)",
}
"""Every placeholder ``CMD`` may use, with what it is replaced by."""


class PipelineCommandError(ValueError):
    """``--pipeline-cmd`` cannot be used: empty, unbalanced quotes or braces, or an unknown placeholder.
    The message names the fix."""


@dataclass(frozen=True)
class PipelineCommand:
    """A parsed ``--pipeline-cmd``: ``words`` (templates, one per argv word) and the placeholders used."""

    text: str
    words: tuple[str, ...]
    used: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> PipelineCommand:
        """Split and check ``text``. Raises :class:`PipelineCommandError` naming the fix."""
        try:
            words = tuple(shlex.split(text))
        except ValueError as e:  # "No closing quotation"
            raise PipelineCommandError(f"--pipeline-cmd {text!r}: {e}; quote it as a shell would") from e
        if not words:
            raise PipelineCommandError("--pipeline-cmd is empty: give the command that starts your driver, e.g. "
                                       "'{python} my_pipeline.py --bootstrap {bootstrap} ...'")
        used: set[str] = set()
        for w in words:
            try:
                parsed = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(w) if f is not None]
            except ValueError as e:  # "Single '}' encountered"
                raise PipelineCommandError(f"--pipeline-cmd word {w!r}: {e}; write a literal brace as {{{{ or }}}}") \
                    from e
            for f, spec, conv in parsed:
                if spec or conv:
                    raise PipelineCommandError(f"--pipeline-cmd word {w!r}: placeholders take no format spec or "
                                               f"conversion; write {{{f}}}")
                if f not in PLACEHOLDERS:
                    raise PipelineCommandError(f"--pipeline-cmd: unknown placeholder {{{f}}}; choose from "
                                               + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
                used.add(f)
        return cls(text, words, frozenset(used))

    def argv(self, values: dict[str, str]) -> list[str]:
        """The driver's argv with every placeholder replaced by ``values[name]`` (one word stays one
        word, whatever it contains: no shell ever sees it). Raises ``KeyError`` when a used placeholder
        has no value (a harness bug, not a user error)."""
        missing = self.used - set(values)
        if missing:
            raise KeyError(f"no value for placeholder(s) {sorted(missing)}")
        return [w.format(**values) for w in self.words]

    def script_name(self) -> str:
        """The stem of the first word ending in ``.py`` (``examples/my_job.py`` → ``my_job``), or "" (a
        test's default name, ``TestConfig.name``)."""
        for w in self.words:
            if w.endswith(".py") and "{" not in w:
                return re.sub(r"[^A-Za-z0-9._+-]", "-", PurePath(w).stem).lstrip("._+-")
        return ""
