"""Delta Lake outputs. Today one: ``--pipeline-cmd ... --output delta``, the Delta table a user's job
writes in ``{output_path}`` (``sinks/user_outputs.py``), read at its latest committed version
(``onceproof.sinks.delta_table``).
"""

from __future__ import annotations

from onceproof.sinks.base import Sink

OUTPUT_DIR = "delta-table"
"""The table's directory in the run directory (``results/<test>/<stamp>/delta-table``)."""


def report_line(summary: dict) -> str:
    """One line on the output (``result["delta"]``): the version read, rows, files, orphans, txn actions."""
    latest = ", ".join(f"{a}={v}" for a, v in sorted((summary.get("txn_latest") or {}).items())) or "none"
    return (f"delta table read at version {summary.get('version')}: {summary.get('rows')} rows in "
            f"{summary.get('files')} files, orphan-files={summary.get('orphan_files')}; "
            f"{summary.get('txn_count')} txn actions (latest per appId: {latest})")


USER_TABLE = Sink("delta", "your job's Delta table", frozenset(), "valid", writer=None,
                  reader="onceproof.sinks.delta_table:read_output", label="your job's Delta table",
                  output_dir=OUTPUT_DIR, output_modes=frozenset({"append"}), result_key="delta",
                  report_line=report_line, committed_end="onceproof.sinks.delta_table:DeltaLogEnds")
"""``--pipeline-cmd ... --output delta``: the Delta table a user's job writes in ``{output_path}``."""
