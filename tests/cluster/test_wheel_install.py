"""onceproof as a user installs it: a wheel built from this checkout, installed into a fresh virtualenv,
used from a project that has its own top-level ``pipeline`` and ``report`` packages.

One test, because every step needs the one before (build → install → import → CLI → plugin run):
* the wheel holds no top-level name but ``onceproof`` (and its dist-info), and declares the pytest plugin;
* in the user's project, ``import pipeline`` and ``import report`` are still the user's packages;
* the installed ``onceproof --help`` and ``onceproof deps`` work (the Maven poms are package data);
* the plugin's ``onceproof_run`` fixture runs a real run on a local cluster from the user's test file (a short
  valid run: a mutant caught through the plugin, with its JUnit entry, is ``tests/cluster/test_pytest_plugin.py``
  in ``make test-extended``, and the plugin's expectations are unit-tested in ``tests/unit/test_pytest_plugin.py``).

The virtualenv installs the lock's versions (``constraints.txt``) from pip's cache, which ``make setup``
filled; a cold cache downloads them (PyPI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, our_jvms

USER_TEST = """
    import pytest

    import pipeline
    import report


    def test_the_projects_own_packages_are_not_shadowed():
        assert pipeline.OWNER == "user" and report.OWNER == "user"


    @pytest.mark.onceproof(sink="eos", nemesis="none", time_limit=15, seed=1, expect="valid")
    def test_a_run_through_the_installed_plugin(onceproof_run):
        r = onceproof_run()
        assert r.counts["lost"] == 0 and r.counts["duplicate"] == 0, r.counts
        assert r.report is not None and r.report.is_file()
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(argv)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _user_project(root: Path) -> Path:
    for pkg in ("pipeline", "report"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text('OWNER = "user"\n')
    (root / "tests").mkdir()
    (root / "tests" / "test_with_onceproof.py").write_text(textwrap.dedent(USER_TEST))
    return root


@pytest.mark.cluster
@pytest.mark.timeout(1200)
def test_the_wheel_installs_next_to_a_projects_own_pipeline_and_report_packages(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # no class-data sharing archives: training them for this throwaway venv's PySpark took about a minute
    # and left 257 MB in the cache (backends/common/cds.py; make setup trains the checkout's own)
    env["ONCEPROOF_CDS"] = "0"
    # built from a copy: setuptools writes build/ and *.egg-info into the tree it builds
    src = tmp_path / "checkout"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv*", "results", "build", "*.egg-info",
                                                              "__pycache__", ".pytest_cache"))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)], src, env, 600)
    wheel, = dist.glob("onceproof-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"onceproof"}, sorted(tops)
    assert any(n.endswith("onceproof/deps/kafka/pom.xml") for n in names), "the poms must ship in the wheel"
    entry_points = next(zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "[pytest11]" in entry_points and "onceproof.pytest_plugin.plugin" in entry_points, entry_points

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py, bin_dir = env_dir / "bin" / "python", env_dir / "bin"
    # --no-compile: byte-compiling every module up front took 27 of the install's 68 s, more than this
    # test's few processes spend compiling what they import (the test: 125-134 s before, 118 s after)
    _run([str(py), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check", "-c",
          str(REPO / "constraints.txt"), f"{wheel}[test]"], tmp_path, env, 900)

    project = _user_project(tmp_path / "project")
    env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    where = _run([str(py), "-c", "import pipeline, report, onceproof.pipeline, onceproof.report as r; "
                  "print(pipeline.__file__); print(report.__file__); print(onceproof.pipeline.__file__)"],
                 project, env, 60).stdout.split()
    assert where[0] == str(project / "pipeline" / "__init__.py") and where[1] == str(project / "report" / "__init__.py")
    assert where[2].startswith(str(env_dir)), "onceproof must come from the installed wheel, not the checkout"

    helped = _run([str(bin_dir / "onceproof"), "--help"], project, env, 60)
    assert "test-all" in helped.stdout and "Exit codes" in helped.stdout
    _run([str(bin_dir / "onceproof"), "deps"], project, env, 600)

    results = tmp_path / "results"
    res = subprocess.run([str(py), "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--onceproof-results={results}",
                          "tests"], cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0 and "2 passed" in res.stdout, res.stdout[-4000:] + res.stderr[-2000:]
    assert list(results.rglob("results.json")), "the plugin's run left no run directory"
    assert not our_jvms(str(results)), "JVMs of the run outlived it"
