"""test-all's version axis (``--kafka-versions``, harness/suite.py): every cell once per release, releases
outermost, each run told its release; refused up front when a release is out of range, named twice, or the
backend cannot pick its brokers' release."""

from __future__ import annotations

from pathlib import Path

from onceproof.harness import suite
from tests.conftest import run_cli


def test_every_cell_once_per_release_in_the_order_given():
    cells = suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["process", "commit"], test_count=1,
                             time_limit=30)
    axis = suite.across_versions(cells, ["3.5.2", "4.4.0"])
    assert [(c.kafka_version, c.package) for c in axis] == [("3.5.2", "process"), ("3.5.2", "commit"),
                                                           ("4.4.0", "process"), ("4.4.0", "commit")]
    assert len({c.name for c in axis}) == 4 and axis[0].name == "eos-process-kafka3.5.2"
    argv = suite.run_command(axis[3], Path("/r"), [])
    assert argv[argv.index("--kafka-version") + 1] == "4.4.0"
    assert suite.across_versions(cells, []) == cells
    assert suite.header_versions({"kafka": "4.1.1", "pyspark": "4.3.0"}, axis)["kafka"].startswith("3.5.2, 4.4.0 (")
    assert suite.header_versions({"kafka": "4.1.1"}, cells) == {"kafka": "4.1.1"}
    assert "--kafka-version" not in suite.run_command(cells[0], Path("/r"), [])


def test_the_axis_is_refused_before_any_cell():
    for args, why in ((["--kafka-versions", "3.5.2,3.4.0"], "3.4.0 is outside the supported range"),
                      (["--kafka-versions", "4.4.0", "--kafka-version", "4.1.1"], "drop --kafka-version"),
                      (["--kafka-versions", "4.4.0", "--backend", "external"], "use --backend local")):
        p = run_cli(["test-all", "--sink", "eos", "--nemesis-package", "commit", "--dry-run", *args], timeout=120)
        assert p.returncode == 254 and why in p.stderr, (args, p.stderr)
    p = run_cli(["test-all", "--sink", "eos", "--nemesis-package", "commit", "--dry-run",
                 "--kafka-versions", "3.5.2, 4.4.0,3.5.2"], timeout=120)
    assert p.returncode == 0, p.stderr
    assert [ln.split()[0] for ln in p.stdout.splitlines() if ln.startswith("eos-")] == \
        ["eos-commit-kafka3.5.2", "eos-commit-kafka4.4.0"]
