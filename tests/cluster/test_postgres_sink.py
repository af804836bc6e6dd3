"""``--sink postgres`` and ``--sink postgres-autocommit`` on the real local cluster, with a real
PostgreSQL server that the run starts and stops (``backends/common/postgres.py``), under
``kill-driver-in-commit-window`` (the driver killed after the database commit of batch N and before
Spark's ``commits/N``) and ``kill-broker``:

* ``postgres`` (rows and a progress row in one transaction) is ``valid``: the restarted driver replays
  batch N, finds it in the progress row and skips it (a ``skip`` event in ``sink.jsonl``);
* ``postgres-autocommit`` (autocommit inserts per executor partition) is ``invalid`` with ``duplicate``
  rows: the replayed batch is inserted again.

Both read the table at ``REPEATABLE READ``; no postgres process and no data directory outlive a run, and
``onceproof check RUN_DIR`` re-checks a run from its snapshots once the server is gone. About 5 minutes on
2 cores.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.conftest import load_run, our_processes, run_cli

# make test-extended: make test runs a user's postgres job instead (tests/cluster/test_user_outputs.py)
pytestmark = [pytest.mark.cluster, pytest.mark.extended]

FAULTS = "kill-driver-in-commit-window,kill-broker"


def _postgres_processes() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and Path(cmd[0]).name == "postgres":
            out.append(p)
    return out


def _run(results: Path, sink: str) -> tuple[Path, dict, list[dict], str]:
    before = set(Path(tempfile.gettempdir()).glob("onceproof-pg-*"))
    p = run_cli(["run", "--sink", sink, "--nemesis", FAULTS, "--seed", "1", "--time-limit", "40",
                 "--results", str(results)], timeout=900)
    run_dir, result, ops = load_run(results)
    assert not our_processes(str(run_dir)), "a process of the run outlived it"
    assert not _postgres_processes(), "a postgres process outlived the run"
    assert set(Path(tempfile.gettempdir()).glob("onceproof-pg-*")) <= before, "the server's data directory was left"
    assert (run_dir / "logs" / "postgres.log").exists()
    cw = next(o for o in ops if o.get("type") == "info" and o.get("f") == "kill-driver-in-commit-window")
    assert cw["outcome"] == "effective" and cw["exercised"], cw
    return run_dir, result, ops, p.stdout + p.stderr


@pytest.mark.timeout(1800)
def test_a_transactional_postgres_sink_is_valid_and_the_autocommit_mutant_is_caught(tmp_path):
    assert not _postgres_processes(), "a postgres server was running before the test"
    run_dir, result, _, out = _run(tmp_path / "ok", "postgres")
    assert result["verdict"] == "valid", (result["counts"], out[-3000:])
    pg = result["postgres"]
    assert pg["isolation"] == "repeatable read" and pg["rows"] == result["stats"]["input_records"] > 0, pg
    assert pg["progress_rows"] == 1, pg
    events = [json.loads(line) for line in (run_dir / "sink.jsonl").read_text().splitlines() if line.strip()]
    assert any(e["event"] == "skip" for e in events), "the replayed batch was not skipped by its progress row"
    assert "postgres table output:" in out

    mut_dir, mut, _, out = _run(tmp_path / "mutant", "postgres-autocommit")
    assert mut["verdict"] == "invalid" and mut["counts"]["duplicate"] > 0, (mut["counts"], out[-3000:])
    assert mut["postgres"]["rows"] > mut["stats"]["input_records"], (mut["postgres"], mut["stats"])

    # the server is gone: the stored run is re-checked from its snapshots
    again = run_cli(["check", str(mut_dir), "--json"], timeout=300)
    assert again.returncode == 1 and json.loads(again.stdout)["counts"]["duplicate"] == mut["counts"]["duplicate"]
