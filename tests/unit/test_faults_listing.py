"""``onceproof faults``: each fault's description is a whole first sentence, or with ``--long`` its whole
paragraph; never a line cut where the docstring happened to wrap (issue 41)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from onceproof.harness import cli
from onceproof.harness.cli.catalog import description, first_paragraph, first_sentence
from onceproof.nemesis import catalog


@pytest.mark.parametrize("doc,want", [
    ("Kill it at a random moment (the supervisor restarts\nit from the checkpoint). Evidence: pid.",
     "Kill it at a random moment (the supervisor restarts it from the checkpoint)."),
    ("Cut a path (e.g. the client's. Or not) for ``hold_s``, then heal. More.",
     "Cut a path (e.g. the client's. Or not) for ``hold_s``, then heal."),
    ("Hold requests, e.g. Produce and EndTxn, i.e. the\nclient's. Then let go.",
     "Hold requests, e.g. Produce and EndTxn, i.e. the client's."),
    ("Read ``a. B`` first. Then more.", "Read ``a. B`` first."),
    ("Stop it (it ends here.) Then more.", "Stop it (it ends here.)"),
    ("Wait 1.5 s or so. then lowercase goes on? Yes.", "Wait 1.5 s or so. then lowercase goes on?"),
    ("Kill, restart, etc. Then check.", "Kill, restart, etc."),
    ("No end mark at all\nacross lines", "No end mark at all across lines"),
    ("One (unclosed paren. Still one", "One (unclosed paren. Still one"),
    ("First.\n\nSecond paragraph.", "First."),
    ("", ""),
])
def test_the_first_sentence_is_whole(doc, want):
    assert first_sentence(doc) == want


def test_every_fault_is_described_by_a_whole_sentence_and_long_by_its_paragraph():
    for name in catalog.FAULTS:
        short, long = description(name), description(name, long=True)
        assert short and short[-1] in ".?!)", f"{name}: {short!r}"
        assert short.count("(") == short.count(")") and short.count("``") % 2 == 0, f"{name}: {short!r}"
        assert long.startswith(short) and not short.startswith(f"``{name}``"), name
    assert description("kill-driver").endswith("(the supervisor restarts it from the checkpoint).")
    assert "Evidence: pid" in description("kill-driver", long=True)
    assert "Evidence" not in description("kill-driver")
    assert first_paragraph("a\n  b\n\nc") == "a b"


def test_the_faults_command_prints_whole_sentences_and_takes_long():
    r = CliRunner().invoke(cli.app, ["faults"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "at a random moment (the supervisor restarts it from the checkpoint)." in r.output
    assert "Evidence: pid" not in r.output
    r = CliRunner().invoke(cli.app, ["faults", "--long"], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and "Evidence: pid" in r.output, r.output
