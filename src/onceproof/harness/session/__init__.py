"""Ad hoc chaos sessions: a run that a person drives (``onceproof session start|status|stop``,
``onceproof nemesis``, ``onceproof heal``).

A session is :func:`onceproof.harness.runner.run` with its run phase replaced: a detached supervisor
process (:mod:`.supervisor`) owns every process of the run, as ``run`` does, and takes its faults from
commands (:mod:`.spool`) instead of a timed plan. Its state is a JSON file in the results root's
``.sessions/`` (:mod:`.state`), so the CLI finds it from any terminal. Design: ``docs/sessions.md``.
"""
