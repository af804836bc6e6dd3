"""Disk retention on hand-made results directories: `onceproof.store.retention.prune` keeps the newest N runs of a
test, repoints the `latest` links, leaves runs in progress and anything that is not a run alone;
`onceproof prune --keep-last N [RESULTS]` does it for every test."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from onceproof.store import retention, runs
from tests.conftest import run_cli

A = ["20250101T000000", "20250102T000000", "20250103T000000", "20250103T000000-1"]  # oldest → newest


def make(root: Path, test: str, stamp: str, finished: bool = True, age_s: float = 7200) -> Path:
    d = root / test / stamp
    (d / "logs").mkdir(parents=True)
    (d / "test.json").write_text(json.dumps({"name": test}))
    if finished:
        (d / "results.json").write_text(json.dumps({"verdict": "valid"}))
    old = time.time() - age_s
    for p in [d / "test.json", d / "logs", *(d.glob("*.json"))]:
        os.utime(p, (old, old))
    return d


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "results"
    for s in A:
        make(r, "a", s)
    make(r, "b", "20241231T000000")
    (r / "a" / "latest").symlink_to(A[-1])
    (r / "latest").symlink_to(Path("a") / A[-1])
    (r / "index.html").write_text("old index")
    (r / "a" / "notes").mkdir()  # not a run: never touched
    return r


def names(root: Path, test: str) -> list[str]:
    return [p.name for p in runs.runs_of(root, test)]


def test_runs_are_ordered_newest_first_with_same_second_suffixes(root):
    assert names(root, "a") == A[::-1]


def test_prune_keeps_the_newest_n(root):
    gone = retention.prune(root, "a", 2)
    assert [p.name for p in gone] == [A[1], A[0]]
    assert names(root, "a") == [A[3], A[2]]
    assert (root / "a" / "notes").is_dir() and names(root, "b") == ["20241231T000000"]
    assert (root / "a" / "latest").resolve() == (root / "a" / A[3]).resolve()
    assert (root / "index.html").read_text() == "old index"  # nothing else rebuilt


def test_keep_last_zero_keeps_everything(root):
    assert retention.prune(root, "a", 0) == [] and names(root, "a") == A[::-1]


def test_latest_links_pointing_at_deleted_runs_are_repointed(root):
    for link, target in ((root / "latest", Path("a") / A[0]), (root / "a" / "latest", Path(A[0]))):
        link.unlink()
        link.symlink_to(target)
    retention.prune(root, "a", 1)
    assert (root / "a" / "latest").resolve() == (root / "a" / A[3]).resolve()
    assert (root / "latest").resolve() == (root / "a" / A[3]).resolve()


def test_latest_pointing_at_another_test_is_left_alone(root):
    (root / "latest").unlink()
    (root / "latest").symlink_to(Path("b") / "20241231T000000")
    retention.prune(root, "a", 1)
    assert (root / "latest").resolve() == (root / "b" / "20241231T000000").resolve()


def test_a_run_in_progress_is_kept_until_it_goes_quiet(tmp_path):
    r = tmp_path / "results"
    running = make(r, "a", "20250101T000000", finished=False, age_s=10)
    make(r, "a", "20250102T000000")
    assert retention.prune(r, "a", 1) == [] and running.exists()
    old = time.time() - 2 * retention.ACTIVE_S
    for p in running.rglob("*"):
        os.utime(p, (old, old))
    assert retention.prune(r, "a", 1) == [running] and not running.exists()


def test_dry_run_deletes_nothing(root):
    assert len(retention.prune(root, "a", 1, dry_run=True)) == 3 and names(root, "a") == A[::-1]


def test_prune_all_prunes_every_test(root):
    make(root, "b", "20250105T000000")
    gone = retention.prune_all(root, 1)
    assert set(gone) == {"a", "b"} and names(root, "a") == [A[3]] and names(root, "b") == ["20250105T000000"]


def test_cli_prune(root):
    p = run_cli(["prune", "--keep-last", "1", "--dry-run", str(root)], timeout=60)
    assert p.returncode == 0 and p.stdout.count("would delete") == 3 and names(root, "a") == A[::-1]
    p = run_cli(["prune", "--keep-last", "1", str(root)], timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("deleted ") >= 3 and names(root, "a") == [A[3]]
    assert (root / "latest").resolve() == (root / "a" / A[3]).resolve()


def test_cli_prune_usage_errors(root, tmp_path):
    for args, what in ((["prune", "--keep-last", "1", "--test", "nope", str(root)], "--test"),
                       (["prune", "--keep-last", "1", str(tmp_path / "missing")], "RESULTS"),
                       (["prune", "--keep-last", "-2", str(root)], "--keep-last")):
        p = run_cli(args, timeout=60)
        assert p.returncode == 254 and what in p.stderr and "\n" not in p.stderr.strip(), p.stderr
    assert names(root, "a") == A[::-1]
