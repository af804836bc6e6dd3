"""The cluster half of ``tests/unit/test_cli_check_live.py``: tests that need a local cluster or Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.unit.test_cli_check_live import RECS, check, commit_group, topics_with  # noqa: F401 (fixtures are used by name)


@pytest.mark.cluster
def test_no_criterion_gives_unknown_then_settle_gives_valid_and_a_stored_run(cluster, tmp_path):
    inp, out = topics_with(cluster, "settle", RECS, RECS)
    results = tmp_path / "results"
    p, r = check(cluster.bootstrap, inp, out, results)
    assert p.returncode == 2 and r["verdict"] == "unknown", p.stderr
    assert any("--group" in x and "--settle" in x for x in r["unknown_reasons"]), r["unknown_reasons"]
    p, r = check(cluster.bootstrap, inp, out, results, "--settle", "2")
    assert p.returncode == 0 and r["verdict"] == "valid", (p.stderr, r)
    d = Path(r["run_dir"])
    assert d.parent.name == f"check-{out}" and d.parent.parent == results.resolve()
    for f in ("results.json", "report.html", "junit.xml", "input.parquet", "output.parquet", "test.json"):
        assert (d / f).exists(), f
    assert str(d) in p.stderr  # its path is printed (on stderr when --json keeps stdout for the JSON)
    assert json.loads((d / "test.json").read_text())["kind"] == "check"
    assert (results / "latest").resolve() == d
    again = run_cli(["check", str(d), "--json"], timeout=120)  # the stored check re-checks offline
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.cluster
def test_unprocessed_input_is_not_lost_while_the_group_is_behind(cluster, tmp_path):
    inp, out = topics_with(cluster, "behind", RECS, RECS[:10])  # the pipeline has done 10 of 15
    commit_group(cluster.bootstrap, "pipe-behind", inp, 10)
    p, r = check(cluster.bootstrap, inp, out, tmp_path / "results", "--group", "pipe-behind", timeout="5")
    assert p.returncode == 2 and r["verdict"] == "unknown", r
    assert any("behind the input by 5 records" in x for x in r["unknown_reasons"]), r["unknown_reasons"]
    commit_group(cluster.bootstrap, "pipe-behind", inp, 15)  # it says it has consumed all: now they are lost
    p, r = check(cluster.bootstrap, inp, out, tmp_path / "results", "--group", "pipe-behind", timeout="5")
    assert p.returncode == 1 and r["verdict"] == "invalid" and r["counts"]["lost"] == 5, r


@pytest.mark.cluster
def test_group_caught_up_and_complete_output_is_valid(cluster, tmp_path):
    inp, out = topics_with(cluster, "done", RECS, RECS)
    commit_group(cluster.bootstrap, "pipe-done", inp, 15)
    p, r = check(cluster.bootstrap, inp, out, tmp_path / "results", "--group", "pipe-done")
    assert p.returncode == 0 and r["verdict"] == "valid", r


@pytest.mark.cluster
def test_missing_topic_names_the_option(cluster, tmp_path):
    p = run_cli(["check", "--bootstrap", cluster.bootstrap, "--input-topic", "no-such-topic",
                 "--results", str(tmp_path / "r")], timeout=120)
    assert p.returncode == 255 and "--input-topic" in p.stderr and "\n" not in p.stderr.strip()
    assert not (tmp_path / "r").exists()


