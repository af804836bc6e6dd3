"""``--sink file``: Spark's own file sink, JSON lines read through its ``_spark_metadata`` commit log.

The job writes it with ``onceproof.pipeline.file_sink`` (Spark's ``FileStreamSink`` plus the hold that
``kill-executor`` uses); the checker reads the files the log lists (``onceproof.sinks.file_log``), or
every file with ``--file-read listing``. Exactly once through its log, so expected ``valid``.
"""

from __future__ import annotations

import dataclasses

from onceproof.pipeline import file_sink
from onceproof.sinks.base import COMMITTED, WRITE_HOLD, JobContext, Sink, path_values

OUTPUT_DIR = "file-sink"
"""The output directory in the run directory (``results/<test>/<stamp>/file-sink``)."""


def write(df, job: JobContext):
    """The :class:`~onceproof.sinks.base.Writer`: ``pipeline/file_sink.py``'s query into
    ``--file-sink-path``. Raises ``SystemExit`` when the job was given no ``--file-sink-path``."""
    a = job.args
    if not a.file_sink_path:
        raise SystemExit(f"--sink {job.sink.name} needs --file-sink-path (the output directory)")
    return file_sink.write(df, path=a.file_sink_path, checkpoint=a.checkpoint, trigger_ms=a.trigger_ms,
                           control_dir=a.control_dir, sink_log=a.sink_log, incarnation=job.incarnation,
                           name=job.query_name)


def report_line(fs: dict) -> str:
    """One line on the output (``result["file_sink"]``): what was read, files, orphan-files."""
    return (f"file sink read {fs.get('read')}: {fs.get('committed_files')} committed files "
            f"({fs.get('committed_records')} records), {fs.get('data_files')} data files in the directory "
            f"({fs.get('listed_records')} records), orphan-files={fs.get('orphan_files')}")


FILE = Sink(
    "file", "Spark's file sink (JSON lines) and its _spark_metadata commit log (pipeline/file_sink.py)",
    frozenset({WRITE_HOLD}), "valid", writer=write, reader="onceproof.sinks.file_log:read_output",
    label="Spark's file sink", output_dir=OUTPUT_DIR, reads=(COMMITTED, "listing"),
    output_modes=frozenset({"append"}), spark_conf=file_sink.SPARK_CONF, result_key="file_sink",
    report_line=report_line, committed_end="onceproof.sinks.file_log:MetadataLogEnds")

USER_FILES = dataclasses.replace(FILE, name="files", summary="your job's file sink", capabilities=frozenset(),
                                 writer=None, label="your job's file sink", spark_conf={},
                                 job_values=path_values)
"""``--pipeline-cmd ... --output files``: Spark's file sink a user's job writes in ``{output_path}``
(``sinks/user_outputs.py``); read as :data:`FILE`, no fault hook."""
