"""The result store (DESIGN §5): the one place that names run files and reads them.

:mod:`onceproof.store.runfiles` names the files of a run directory, :mod:`onceproof.store.readers` has one reader per
file, :mod:`onceproof.store.runs` creates and lists run directories under the results root, and
:mod:`onceproof.store.retention` deletes old ones.
"""
