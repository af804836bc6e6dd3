"""Find Spark's commit window from outside the driver, for pipelines without onceproof's hooks (issue 9).

Spark's micro-batch protocol (``MicroBatchExecution``): the driver writes ``offsets/N`` to the checkpoint
before running batch N, the sink writes batch N's output, and only then does the driver write
``commits/N``. A driver killed after the output is visible and before ``commits/N`` replays batch N on
restart with the same offsets: an at-least-once sink writes it twice, an exactly-once sink must skip
it. The bundled pipeline announces that window through ``pipeline/hooks.py``; a user's pipeline cannot.

:class:`CommitWindowWatch` sees it from the outside. It is fed, at each poll, the checkpoint's latest
``offsets/N`` and ``commits/N`` and the output topic's end offsets at read_committed (the LSO, so an
open transaction does not count as visible). The window of batch N is open when ``offsets/N`` exists,
``commits/N`` does not, and the output's end offsets have grown since ``offsets/N`` was first seen:
batch N's data (or part of it) is visible and Spark has not logged the commit. A batch that writes
nothing never opens a window (there is nothing to replay visibly), and neither does one whose output
landed before the first poll that saw its ``offsets/N``: poll faster than a batch commits (the bundled
pipeline's batches take ≥ 1 s; 0.1–0.2 s polls are enough), and a missed window is reported as such.

A Kafka output's previous batch can still be landing when ``offsets/N`` appears: Kafka's
``commit_transaction()`` returns once the coordinator has logged the commit, and it writes the commit
markers to the partitions after that (KIP-98, "Transactional Messaging in Kafka", the two-phase commit),
so batch N-1's records can become visible at read_committed after Spark wrote ``commits/N-1`` and
``offsets/N``. Growth in the first :attr:`CommitWindowWatch.settle_s` after ``offsets/N`` is first seen is
taken into the baseline, not counted as batch N's, and counted in :attr:`CommitWindowWatch.absorbed`. The
settle is the output's own (``CommittedEnd.settle_s``: a Kafka topic's 0.5 s; a table, a file log or a
database commits atomically before ``commits/N-1`` and settles for 0 s). A batch N that commits within the
settle is missed, and the nemesis watches the next one. A marker later than the settle (its partition's
leader down for longer, under ``kill-broker``) can still be taken for batch N's output: the run's evidence
names the baseline and the end at the kill, so such a kill can be told apart afterwards.

Pure: no file, topic or clock is read here; the nemesis polls and feeds it (the time too).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CommitWindowWatch:
    """Polled state machine over (latest ``offsets/N``, latest ``commits/N``, output end offsets).

    Attributes:
        pending: the batch whose ``offsets/N`` is logged without ``commits/N``, or ``None``.
        baseline: ``{partition: end offset}`` of the output when ``pending`` was first seen.
    """

    pending: int | None = None
    baseline: dict[int, int] = field(default_factory=dict)
    settle_s: float = 0.0
    """How long after ``offsets/N`` is first seen growth still counts as the previous batch's, s."""
    since: float | None = None
    absorbed: int = 0
    """How many polls saw growth within the settle (taken into the baseline), over the watch's life."""

    def observe(self, latest_offsets: int | None, latest_commit: int | None,
                output_end: dict[int, int], now: float | None = None) -> int | None:
        """Feed one poll; returns the batch N whose commit window is open now, else ``None``.

        Args:
            latest_offsets: highest N with ``offsets/N`` (``onceproof.store.checkpoint.latest_offset_batch``).
            latest_commit: highest N with ``commits/N`` (``onceproof.store.checkpoint.latest_commit``).
            output_end: the output topic's end offsets at read_committed, ``{partition: offset}``
                (``onceproof.clients.topics.end_offsets(..., committed=True)``); partitions may be missing.
            now: the poll's monotonic time, s; ``None``: no settle (every growth counts).
        """
        if latest_offsets is None or (latest_commit is not None and latest_commit >= latest_offsets):
            self.pending, self.baseline = None, {}  # no batch in flight
            return None
        if self.pending != latest_offsets:  # a new batch in flight: its output starts from here
            self.pending, self.baseline, self.since = latest_offsets, dict(output_end), now
            return None
        if now is not None and self.since is not None and now - self.since < self.settle_s:
            grew = False
            for p, off in output_end.items():  # the previous batch's markers landing: not batch N's output
                grew = grew or off > self.baseline.get(p, 0)
                self.baseline[p] = max(off, self.baseline.get(p, 0))
            self.absorbed += grew
            return None
        grew = any(off > self.baseline.get(p, 0) for p, off in output_end.items())
        return self.pending if grew else None
