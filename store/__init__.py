"""The result store (DESIGN §5): the one place that names run files and reads them.

:mod:`store.runfiles` names the files of a run directory, :mod:`store.readers` has one reader per
file, :mod:`store.runs` creates and lists run directories under the results root, and
:mod:`store.retention` deletes old ones.
"""
