"""Columnar chunks: turn frames built a bounded chunk of records at a time into compact columns and
join them, and hand freed memory back to the OS. Used by the topic reader (``onceproof.clients.topics.Records``)
and the history reader (``onceproof.store.readers.read_history``), so that a 10M-record check holds columns, not
per-record Python objects (issue 11; numbers in ``bench/README.md``).

:class:`Chunks` takes the frames one at a time and keeps each column as its own arrays (so that the
join frees the chunks a column at a time, or, given a capacity, writes them into one array allocated
up front, so that nothing is copied to join them); string columns are kept as codes into one list of
categories per column, shared by every chunk (a chunk adds only the values not seen before), so the
chunks do not each hold their own copy of the distinct values.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
from pandas.arrays import ArrowStringArray
from pandas.core.arrays.masked import BaseMaskedArray

from onceproof.blocks import row_blocks

HIGH_CARDINALITY = ("op.input",)
"""String columns stored as ``string[pyarrow]`` whatever their values: one distinct value per record,
where a ``category`` would hold a Python str and a hash-table slot per row."""


def release_freed_memory() -> None:
    """Give the C heap's free pages back to the operating system: glibc's ``malloc_trim(0)`` (through
    ``ctypes``); nothing on other C libraries. Never raises.

    Why: a read frees millions of small objects (``Message``, str, bytes) and numpy frees 10M-row
    temporaries; glibc keeps freed heap pages mapped (its mmap threshold grows after the first large
    free, so later large arrays come from the heap too), so without a trim the process's resident
    size stays at its high-water mark and the next step's allocations stack on top of it. Costs a few
    ms; call it after dropping a big intermediate, not per record. pyarrow's memory pool (when pyarrow
    is loaded) is asked to release its unused memory too."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes
            import ctypes.util

            _TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "malloc_trim", False)
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        try:
            _TRIM(0)
        except OSError:
            pass
    pa = sys.modules.get("pyarrow")  # pyarrow's own allocator (mimalloc) keeps freed pages as well
    if pa is not None:
        pa.default_memory_pool().release_unused()


_TRIM = None  # libc's malloc_trim once looked up; False where there is none (musl, macOS)


CATEGORY_MAX = 65_536
"""Distinct values up to which a string column of a chunk is kept as categories whatever the chunk's
size; above, only when at most half of the chunk's values are distinct."""


class _Codes:
    """A chunk's string column as codes into its :class:`Chunks`' categories of that column (-1 = NA)."""

    __slots__ = ("codes",)

    def __init__(self, codes: np.ndarray):
        self.codes = codes


class _Slab:
    """A column's consecutive chunks written into arrays allocated once for ``capacity`` rows (numpy
    allocates them untouched: only the rows written become resident), so the column is never copied
    to be joined: ``data`` (values or category codes) and, for a masked (nullable) dtype, ``mask``."""

    __slots__ = ("kind", "data", "mask", "n", "ea_type")

    def __init__(self, piece, capacity: int):
        self.n = 0
        self.mask = self.ea_type = None
        if isinstance(piece, _Codes):
            self.kind, self.data = "codes", np.empty(capacity, piece.codes.dtype)
        elif isinstance(piece, BaseMaskedArray):
            self.kind, self.ea_type = "masked", type(piece)
            self.data = np.empty(capacity, piece.dtype.numpy_dtype)
            self.mask = np.empty(capacity, bool)
        else:
            self.kind, self.data = "numpy", np.empty(capacity, piece.dtype)

    @staticmethod
    def holds(piece) -> bool:
        """Whether a piece of this kind can be written into a slab."""
        return isinstance(piece, (_Codes, BaseMaskedArray)) or \
            (isinstance(piece, np.ndarray) and piece.dtype.kind in "iufb")

    def add(self, piece, k: int) -> bool:
        """Write ``piece`` (``k`` rows) after the rows held; False (nothing written) when it does not fit
        the slab's kind, dtype or capacity."""
        if self.n + k > len(self.data):
            return False
        at = slice(self.n, self.n + k)
        if self.kind == "codes" and isinstance(piece, _Codes):
            if piece.codes.dtype.itemsize > self.data.dtype.itemsize:  # more categories: wider codes
                wider = np.empty(len(self.data), piece.codes.dtype)
                wider[:self.n] = self.data[:self.n]
                self.data = wider
            self.data[at] = piece.codes
        elif self.kind == "masked" and type(piece) is self.ea_type and piece.dtype.numpy_dtype == self.data.dtype:
            self.data[at] = piece.to_numpy(dtype=self.data.dtype, na_value=0)
            self.mask[at] = piece.isna()
        elif self.kind == "numpy" and isinstance(piece, np.ndarray) and piece.dtype == self.data.dtype:
            self.data[at] = piece
        else:
            return False
        self.n += k
        return True

    def piece(self):
        """The rows held, as a chunk's piece would be (views of the slab's arrays)."""
        if self.kind == "codes":
            return _Codes(self.data[:self.n])
        if self.kind == "masked":
            return self.ea_type(self.data[:self.n], self.mask[:self.n])
        return self.data[:self.n]


class Chunks:
    """A frame built a chunk at a time: :meth:`add` each chunk (a DataFrame), then :meth:`frame` once.

    What :meth:`add` keeps of a chunk: numeric and other columns as a copy of their values; columns of
    str and NA as categories (codes into one growing list of the column's distinct values) or, for
    columns in :data:`HIGH_CARDINALITY` and those with more distinct values per chunk than
    :data:`CATEGORY_MAX` and half the chunk's rows, as ``string[pyarrow]``; a column with no value but
    NA as nothing (it takes the other chunks' dtype). Memory: the columns kept, plus the distinct
    values once per column. Float64 columns are narrowed to float32, and with ``narrow_ints`` int64
    columns (but those named in ``keep_wide``) to int32, when every value is exactly the same in the
    narrower type: per chunk while held, and the joined column again.

    With ``capacity`` (an upper bound on the rows, e.g. a topic's end offsets), numeric, nullable and
    category columns are written into arrays allocated once for that many rows (:class:`_Slab`; untouched
    rows cost no memory), so joining them copies nothing; a chunk whose dtype differs from its column's
    slab (a float chunk among ints) and every later chunk of that column are kept apart and joined by
    ``pandas.concat``, as without ``capacity``."""

    def __init__(self, narrow_ints: bool = False, capacity: int | None = None, keep_wide: tuple = ()):
        self.cols: dict = {}                 # column → segments: a _Slab, or [piece or None (NA), rows]
        self.rows = 0
        self.cats: dict[str, dict] = {}      # column → {value: code}, in order of first appearance
        self.wide: set = set(HIGH_CARDINALITY)  # string columns kept as string[pyarrow]
        self.narrow_ints = narrow_ints
        self.keep_wide = set(keep_wide)      # int columns never narrowed
        self.capacity = capacity

    def _ints(self, name) -> bool:
        """Whether ``name``'s int64 values are narrowed to int32 when they fit."""
        return self.narrow_ints and name not in self.keep_wide

    def __len__(self) -> int:
        """Rows added so far."""
        return self.rows

    def add(self, frame: pd.DataFrame) -> None:
        """Keep ``frame``'s columns (see the class docstring); ``frame`` itself is not kept."""
        k = len(frame)
        for name in frame.columns:
            segs = self.cols.setdefault(name, [[None, self.rows]] if self.rows else [])
            self._append(segs, self._column(name, frame[name]), k)
        for name, segs in self.cols.items():
            if name not in frame.columns:
                segs.append([None, k])
        self.rows += k

    def _append(self, segs: list, piece, k: int) -> None:
        last = segs[-1] if segs else None
        if isinstance(last, _Slab) and piece is not None and last.add(piece, k):
            return
        if self.capacity is not None and _Slab.holds(piece) and not any(isinstance(g, _Slab) for g in segs):
            try:
                slab = _Slab(piece, max(self.capacity - self.rows, k))
            except MemoryError:  # an outsized capacity: keep the pieces apart instead
                slab = None
            if slab is not None and slab.add(piece, k):
                segs.append(slab)
                return
        segs.append([piece, k])

    def _column(self, name, s: pd.Series):
        if isinstance(s.dtype, pd.CategoricalDtype):
            if pd.api.types.infer_dtype(s.cat.categories, skipna=True) in ("string", "empty"):
                return self._strings(name, s.cat.codes.to_numpy(), s.cat.categories.to_numpy(dtype=object), s)
        elif s.dtype == object or (isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "python"):
            kind = pd.api.types.infer_dtype(s, skipna=True)
            if kind == "empty":
                return None
            if kind == "string":
                if name in self.wide:
                    return pd.array(s.to_numpy(dtype=object, na_value=None), dtype="string[pyarrow]")
                codes, uniq = pd.factorize(s.to_numpy(dtype=object, na_value=None), use_na_sentinel=True)
                return self._strings(name, codes, uniq, s)
        arr = s.array
        if isinstance(arr, pd.api.extensions.ExtensionArray) and not isinstance(arr, pd.arrays.NumpyExtensionArray):
            return arr.copy()
        x = s.to_numpy()
        small = _narrow(x, self._ints(name))  # narrowed while held (the joined column is narrowed again)
        return small if small is not x else np.array(x, copy=True)

    def _strings(self, name, codes: np.ndarray, uniq: np.ndarray, s: pd.Series):
        """Codes into the column's shared categories, or ``string[pyarrow]`` for a column too varied."""
        if name in self.wide or len(uniq) > max(CATEGORY_MAX, len(s) // 2):
            self.wide.add(name)
            return pd.array(s.to_numpy(dtype=object, na_value=None), dtype="string[pyarrow]")
        known = self.cats.setdefault(name, {})
        if not len(uniq):
            return None
        # each distinct value's code among the column's categories (new values appended), in the
        # smallest int type that holds them so far (a later chunk may need a wider one)
        at = np.fromiter((known.setdefault(u, len(known)) for u in uniq.tolist()), np.int32, len(uniq))
        out = at.astype(np.int8 if len(known) < (1 << 7) else np.int16 if len(known) < (1 << 15) else np.int32)[codes]
        out[np.asarray(codes) < 0] = -1
        return _Codes(out)

    def frame(self) -> pd.DataFrame:
        """The chunks as one frame (columns in order of first appearance, NA where a chunk lacks a column)
        and empties this object. Category columns stay ``category`` (categories in order of first
        appearance) unless some chunk made the column ``string[pyarrow]``; other dtypes combine as
        ``pandas.concat`` combines them (int64 with NA chunks: float64, as ``DataFrame.from_records``
        gives); float64 (and with ``narrow_ints`` int64) columns are narrowed when that is exact. The
        chunks are freed column by column (the peak is the result plus one column's chunks), a column
        held in one slab is not copied at all, and the frame is not consolidated (no copy into 2-D
        blocks)."""
        cols, self.cols = self.cols, {}
        n, self.rows = self.rows, 0
        data = {}
        for name in list(cols):
            segs = cols.pop(name)
            pieces = [g.piece() if isinstance(g, _Slab) else g[0] for g in segs]
            sizes = [g.n if isinstance(g, _Slab) else g[1] for g in segs]
            del segs
            cats = self.cats.get(name)
            data[name] = _narrow(_concat_column(pieces, sizes, pd.Index(list(cats), dtype=object) if cats else None),
                                 self._ints(name))
            del pieces
            release_freed_memory()  # the pieces' pages, before the next column is allocated
        self.cats.clear()
        return pd.DataFrame(data, index=pd.RangeIndex(n), columns=pd.Index(list(data), dtype=object), copy=False)


def _concat_column(pieces: list, sizes: list[int], cats: pd.Index | None):
    """One column's pieces (None where a chunk has no value in it) as one array of ``sum(sizes)`` rows;
    ``cats``: the categories :class:`_Codes` pieces refer to."""
    have = [p for p in pieces if p is not None]
    n = sum(sizes)
    if not have:
        return np.full(n, None, object)
    if len(pieces) == 1:  # one chunk, or one slab: nothing to join
        p = pieces[0]
        return pd.Categorical.from_codes(p.codes, categories=cats) if isinstance(p, _Codes) else p
    if all(isinstance(p, _Codes) for p in have):
        codes = np.concatenate([p.codes if p is not None else np.full(k, -1, np.int8) for p, k in zip(pieces, sizes)])
        return pd.Categorical.from_codes(codes, categories=cats)
    if all(isinstance(p, (_Codes, ArrowStringArray)) for p in have):
        full = [pd.array(np.full(k, None, object), dtype="string[pyarrow]") if p is None
                else pd.Categorical.from_codes(p.codes, categories=cats).astype("string[pyarrow]")
                if isinstance(p, _Codes) else p for p, k in zip(pieces, sizes)]
        return ArrowStringArray._concat_same_type(full)
    numeric = _concat_numeric(pieces, sizes)
    if numeric is not None:
        return numeric
    if any(isinstance(p, _Codes) for p in have):  # str in some chunks, other objects in others
        pieces = [pd.Categorical.from_codes(p.codes, categories=cats).astype(object) if isinstance(p, _Codes) else p
                  for p in pieces]
    na_dtype = have[0].dtype if all(isinstance(p, BaseMaskedArray) for p in have) else None  # Int64 stays Int64
    series = [pd.Series(p) if p is not None
              else pd.Series(pd.array([pd.NA] * k, dtype=na_dtype)) if na_dtype is not None
              else pd.Series(np.full(k, np.nan))
              for p, k in zip(pieces, sizes) if k]
    return pd.concat(series, ignore_index=True).array if series else have[0][:0]


def _concat_numeric(pieces: list, sizes: list[int]) -> np.ndarray | None:
    """The join of numpy int / float pieces (None: NaN rows) as ``pandas.concat`` gives it (its dtype, found
    on one row of each piece), written into one array a block at a time instead of converting each piece
    whole first; a float64 join that is exact as float32 is written as float32 directly (what
    :func:`_narrow` makes of it), so neither a float64 copy nor a round-trip temporary of the whole column
    exists. ``None`` for any other pieces."""
    if not all(p is None or (isinstance(p, np.ndarray) and p.dtype.kind in "iuf") for p in pieces):
        return None
    have = [(p, k) for p, k in zip(pieces, sizes) if k]
    if not have:
        return None
    dtype = pd.concat([pd.Series(np.zeros(1, p.dtype) if p is not None else np.full(1, np.nan)) for p, _ in have],
                      ignore_index=True).dtype
    if not isinstance(dtype, np.dtype) or dtype.kind not in "iuf":
        return None
    n = sum(k for _, k in have)
    if dtype == np.float64:
        out = np.empty(n, np.float32)
        if _fill(out, have, exact32=True):
            return out
        del out
    out = np.empty(n, dtype)
    _fill(out, have)
    return out


def _fill(out: np.ndarray, have: list, exact32: bool = False) -> bool:
    """Write the pieces (``(piece or None, rows)``) one after another into ``out``, a block of rows
    (:func:`onceproof.blocks.row_blocks`) at a time, as ``astype(out.dtype)`` converts them (None: NaN).
    With ``exact32`` (``out`` float32) each value goes through float64 first and False is returned at
    the first one that float32 changes."""
    at = 0
    for p, k in have:
        for a, b in row_blocks(k):
            v = p[a:b] if p is not None else np.full(b - a, np.nan)
            if exact32:
                v = v.astype(np.float64, copy=False)
                small = v.astype(np.float32)
                if not np.array_equal(small.astype(np.float64), v, equal_nan=True):
                    return False
                v = small
            out[at + a:at + b] = v
        at += k
    return True


def _narrow(arr, ints: bool):
    """A float64 numpy array as float32 when every value (NaN included) survives the round trip; with
    ``ints`` an int64 one as int32 when every value fits. Anything else unchanged."""
    if isinstance(arr, pd.arrays.NumpyExtensionArray):
        arr = arr.to_numpy()
    if not isinstance(arr, np.ndarray) or not len(arr):
        return arr
    if arr.dtype == np.float64:  # checked a block at a time: stops at the first inexact block
        small = np.empty(len(arr), np.float32)
        if _fill(small, [(arr, len(arr))], exact32=True):
            return small
    elif ints and arr.dtype == np.int64:
        lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        if lo <= arr.min() and arr.max() <= hi:
            return arr.astype(np.int32)
    return arr
