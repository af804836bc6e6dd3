"""onceproof as a pytest plugin: run the harness from your own test suite and CI.

Installed with onceproof and loaded by pytest through the ``pytest11`` entry point ``onceproof``
(``pyproject.toml``); ``-p no:onceproof`` turns it off. It gives:

* ``onceproof_run`` – a callable ``onceproof_run(**config) -> RunResult``: one whole ``onceproof run``
  (its own fresh cluster, workload, faults, check, report), config keys being :class:`onceproof.harness.config.TestConfig`
  fields validated as the CLI validates them;
* ``onceproof_cluster`` – a running Kafka cluster of the chosen backend for a module (or the session),
  for checking your own pipeline against it, stopped on every exit path;
* ``@pytest.mark.onceproof(**config, expect=...)`` – the run's config for a test, a class or a module;
* options ``--onceproof-backend NAME``, ``--onceproof-results DIR``, ``--onceproof-cluster-scope``;
* in the JUnit XML (``--junitxml``), each test's run verdict, anomaly counts and report path as
  ``<properties>``, and a one-paragraph failure when the verdict is not the one the test expects.

Why a top-level package ``pytest_onceproof`` and not ``harness/pytest_plugin.py``: the plugin is a front
end to the harness, as ``harness/cli.py`` is, but its host is pytest, a test-only dependency
(``[test]`` extra) that nothing under ``harness/`` imports. Keeping it outside ``harness/`` keeps the run
engine free of pytest, and the name follows pytest's ``pytest_<name>`` convention for plugins, so
``pip show``/``pytest --trace-config`` users find it where they look. Nothing in the harness imports it.

Modules: :mod:`onceproof.pytest_plugin.plugin` (hooks and fixtures: the only code that touches pytest) and
:mod:`onceproof.pytest_plugin.runs` (building a validated config from keyword arguments, running it, the
:class:`~onceproof.pytest_plugin.runs.RunResult`, the verdict judgement and the JUnit properties: plain functions,
unit-tested without a cluster). This ``__init__`` imports neither: pytest loads the plugin in every
session of an environment where onceproof is installed, and the harness's imports (pandas, Kafka client)
are paid only by a test that asks for a run.
"""
