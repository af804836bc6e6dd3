"""onceproof as a pytest plugin: run the harness from your own test suite and CI.

Installed with onceproof and loaded by pytest through the ``pytest11`` entry point ``onceproof``
(``pyproject.toml``); ``-p no:onceproof`` turns it off. It gives:

* ``onceproof_run`` – a callable ``onceproof_run(**config) -> RunResult``: one whole ``onceproof run``
  (its own fresh cluster or the session's warm one, workload, faults, check, report), config keys being
  :class:`onceproof.harness.config.TestConfig` fields validated as the CLI validates them;
* ``onceproof_cluster`` – a running Kafka cluster of the chosen backend for a module (or the session),
  for checking your own pipeline against it, stopped on every exit path;
* ``@pytest.mark.onceproof(**config, expect=...)`` – the run's config for a test, a class or a module;
* options ``--onceproof-backend NAME``, ``--onceproof-results DIR``, ``--onceproof-cluster-scope``, and
  ``--onceproof-warm-cluster`` (the runs lease one warm cluster for the session: ``onceproof_warm_cluster``);
* in the JUnit XML (``--junitxml``), each test's run verdict, anomaly counts and report path as
  ``<properties>``, and a one-paragraph failure when the verdict is not the one the test expects.

Why a package of its own, next to ``onceproof.harness`` and not inside it: the plugin is a front end to
the harness, as ``onceproof.harness.cli`` is, but its host is pytest, a test-only dependency (``[test]``
extra) that nothing under ``onceproof.harness`` imports. Keeping it apart keeps the run engine free of
pytest; nothing in the harness imports the plugin. Its entry point is named ``onceproof``
(``pytest11: onceproof = onceproof.pytest_plugin.plugin``), so ``-p no:onceproof`` and
``pytest --trace-config`` name it that way.

Modules: :mod:`onceproof.pytest_plugin.plugin` (hooks and fixtures: the only code that touches pytest) and
:mod:`onceproof.pytest_plugin.runs` (building a validated config from keyword arguments, running it, the
:class:`~onceproof.pytest_plugin.runs.RunResult`, the verdict judgement and the JUnit properties: plain functions,
unit-tested without a cluster). This ``__init__`` imports neither. Pytest loads the plugin in every
session of an environment where onceproof is installed, so loading it imports only the standard library,
pytest and the backend registry: the harness (its config, CLI parser and runner pull pandas and the Kafka
client) is imported by the functions that need it, when a test asks for a run or a cluster.
"""
