"""Issue 9's pure pieces for a user's pipeline: the ``--pipeline-cmd`` template and the commit window
seen from outside the driver (no hook in the user's code). Synthetic inputs only."""

from __future__ import annotations

import pytest

from backends.user_pipeline import PLACEHOLDERS, PipelineCommand, PipelineCommandError
from nemesis.commit_window_watch import CommitWindowWatch

VALUES = {"python": "/venv/bin/python", "bootstrap": "127.0.0.1:9092,127.0.0.1:9093", "input_topic": "input",
          "output_topic": "output", "checkpoint": "/runs/a b/checkpoint", "master": "local-cluster[2,1,1024]",
          "jars": "/j/a.jar,/j/b.jar"}


def test_every_placeholder_expands_to_one_word_without_a_shell():
    cmd = PipelineCommand.parse("{python} 'my pipe.py' --bootstrap={bootstrap} --in {input_topic} "
                                "--out {output_topic} --checkpoint {checkpoint} --master {master} --jars {jars} "
                                "--literal '{{not a placeholder}}' '$HOME;rm'")
    assert cmd.used == set(PLACEHOLDERS)
    assert cmd.argv(VALUES) == ["/venv/bin/python", "my pipe.py", "--bootstrap=127.0.0.1:9092,127.0.0.1:9093",
                                "--in", "input", "--out", "output", "--checkpoint", "/runs/a b/checkpoint",
                                "--master", "local-cluster[2,1,1024]", "--jars", "/j/a.jar,/j/b.jar",
                                "--literal", "{not a placeholder}", "$HOME;rm"]
    assert cmd.argv(VALUES) == cmd.argv(dict(VALUES)), "a restart gets the same argv"


@pytest.mark.parametrize("text, says", [
    ("", "is empty"),
    ("   ", "is empty"),
    ("{python} job.py --x {bootstrap_servers}", "unknown placeholder {bootstrap_servers}; choose from {python}"),
    ("{python} job.py {}", "unknown placeholder {}"),
    ("{python} job.py --b {bootstrap!r}", "no format spec or conversion; write {bootstrap}"),
    ("{python} job.py --b {bootstrap:>10}", "no format spec"),
    ("{python} job.py '--b {bootstrap'", "literal brace"),
    ("{python} job.py 'unclosed", "No closing quotation"),
])
def test_a_bad_command_is_refused_naming_the_fix(text, says):
    with pytest.raises(PipelineCommandError) as e:
        PipelineCommand.parse(text)
    assert says in str(e.value), str(e.value)


def test_a_placeholder_without_a_value_is_a_harness_bug_not_silently_blank():
    cmd = PipelineCommand.parse("{python} job.py --jars {jars}")
    with pytest.raises(KeyError, match="jars"):
        cmd.argv({"python": "py"})


def test_the_window_opens_when_output_grows_after_offsets_n_and_before_commits_n():
    w = CommitWindowWatch()
    assert w.observe(None, None, {}) is None                      # nothing yet
    assert w.observe(0, None, {0: 0, 1: 0}) is None               # offsets/0 logged: baseline taken
    assert w.observe(0, None, {0: 0, 1: 0}) is None               # batch 0 running, nothing visible
    assert w.observe(0, None, {0: 5, 1: 0}) == 0                  # its output is visible, no commits/0
    assert w.observe(0, 0, {0: 5, 1: 3}) is None                  # commits/0: closed
    assert w.observe(1, 0, {0: 5, 1: 3}) is None                  # offsets/1: new baseline
    assert w.observe(1, 0, {0: 5, 1: 3, 2: 1}) == 1               # a partition new to the baseline grew
    assert w.observe(2, 1, {0: 9, 1: 3, 2: 1}) is None            # offsets/2 seen after its output: baseline
    assert w.observe(2, 1, {0: 9, 1: 3, 2: 1}) is None            # ... so this window is missed, not invented


def test_an_empty_batch_and_a_restart_replay():
    w = CommitWindowWatch()
    w.observe(3, 2, {0: 10})
    assert w.observe(3, 2, {0: 10}) is None                       # batch 3 wrote nothing: no window
    assert w.observe(3, 2, {0: 12}) == 3                          # now it did
    # the driver is killed here; the restarted driver replays batch 3 (offsets/3 still without commits/3)
    assert w.observe(3, 2, {0: 12}) == 3                          # still open: output grew since offsets/3
    assert w.observe(3, 3, {0: 12}) is None                       # the replay committed
