"""The per-run report (``report.html``), its JUnit twin (``junit.xml``) and the results index.

One module per concern: :mod:`onceproof.report.load` reads a run directory into frames,
:mod:`onceproof.report.analysis` computes the numbers shown, :mod:`onceproof.report.figures` draws them with
plotly, :mod:`onceproof.report.html` writes the page (:func:`onceproof.report.html.build_report`),
:mod:`onceproof.report.index` the index over runs (:func:`onceproof.report.index.build_index`),
:mod:`onceproof.report.junit` the JUnit file (:func:`onceproof.report.junit.write_junit`). Run files are
named and read only through :mod:`onceproof.store`.

From the shell: ``python -m report RUN_DIR... [--junit] [--index ROOT]``.
"""
