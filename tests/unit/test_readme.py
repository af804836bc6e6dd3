"""README.md keeps to the project's limits: at most 150 lines, its two commands, and no one machine's
absolute paths (issue 41: it was 152 lines and its excerpt showed a developer's checkout path)."""

from __future__ import annotations

import re

from tests.conftest import REPO

README = REPO / "README.md"
MAX_LINES = 150
# a home or checkout directory of some machine: /home/u/..., /Users/u/..., /root/..., /work/...
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:home|Users|root|work)/[\w.-]+")


def test_the_readme_fits_in_150_lines_and_keeps_its_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"README.md is {len(text.splitlines())} lines (limit {MAX_LINES})"
    assert re.search(r"^make run\b", text, re.M) and re.search(r"^make test\b", text, re.M)


def test_the_readme_shows_no_machines_absolute_path():
    text = README.read_text(encoding="utf-8")
    assert str(REPO) not in text
    assert not MACHINE_PATH.findall(text), MACHINE_PATH.findall(text)
    assert MACHINE_PATH.search("report: /work/main/results/x/report.html")  # what it showed before
    assert not MACHINE_PATH.search("pip install /path/to/onceproof and ~/.cache/onceproof/jars")
