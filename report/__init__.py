"""The per-run report (``report.html``), its JUnit twin (``junit.xml``) and the results index.

One module per concern: :mod:`report.load` reads a run directory into frames, :mod:`report.analysis`
computes the numbers shown, :mod:`report.figures` draws them with plotly, :mod:`report.html` writes the
page (:func:`report.html.build_report`), :mod:`report.index` the index over runs
(:func:`report.index.build_index`), :mod:`report.junit` the JUnit file
(:func:`report.junit.write_junit`). Run files are named and read only through :mod:`store`.

From the shell: ``python -m report RUN_DIR... [--junit] [--index ROOT]``.
"""
