"""Checking a run: read what the sinks hold at their commit points (and the input, the history, the
sink log), hand the frames to the pure checkers in ``onceproof.checkers``, store snapshots and the
result. ``engines`` chooses between the pandas checks and the same checks as Spark jobs (``spark/``)."""
