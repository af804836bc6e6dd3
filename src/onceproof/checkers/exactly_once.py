"""The exactly-once checker: every input record appears in the output exactly once, in order per key.

Pure: it takes frames and returns a dict; it never talks to Kafka (``harness/`` reads the topics).

Inputs (pandas DataFrames):

* ``history`` – workload ops with columns ``type`` (invoke/ok/fail/info), ``f``, ``key``, ``seq`` (and
  ``error`` for failed sends); may be empty (``onceproof check`` on a foreign pipeline has none).
* ``input`` – the input topic read at read_committed: ``key`` (str), ``seq`` (int), ``partition``,
  ``offset``.
* ``output`` – the output topic read at read_committed after recovery: ``key``, ``seq`` (Int64, NA when
  the value could not be parsed), ``partition``, ``offset`` and optional provenance columns named as
  in ``pipeline/provenance.py`` (``op.batch``, ``op.attempt``, ``op.input``, ...).

Accounting is per input record, i.e. per input (partition, offset): each is owed exactly once. An
output copy is paired with the input record it came from through its ``op.input`` header
(``"<input partition>:<input offset>"``, written by ``pipeline/transactional_sink.py``) when it has a
parsable one; copies without it are paired by (key, seq): per (key, seq), the input records that no
``op.input`` claimed are owed by the unpaired copies, so ``lost = max(0, unclaimed - copies)`` and the
extra copies are duplicates. With no ``op.input`` at all this is plain counting per (key, seq).

Anomalies (docs/architecture.md, "Anomalies"; Jepsen's names where they fit):

* ``duplicate`` – a (key, seq) with more output copies than the input owes: an input record named by
  two or more copies' ``op.input``, or more unpaired copies than unclaimed input records (or, for a
  (key, seq) not in the input, a second copy). Counted as (key, seq) pairs; ``duplicate-records`` counts
  the extra copies. Each example lists every copy of the pair with its provenance (``input`` = its
  ``op.input``).
* ``lost`` – an input record with no output copy (by ``op.input``, or by count for unpaired copies).
  Counted as input records.
* ``lost-deleted`` – an input record that a fault deleted from the input log (``delete-input-records``,
  KIP-107's DeleteRecords: the frame's :data:`DELETED_BY` column) before the query read it, with no
  output copy: the pipeline skipped it (``failOnDataLoss=false``). Counted apart from ``lost`` so that
  the two causes never mix; examples say what deleted it.
* ``lost-write`` – a send acknowledged ``ok`` in the history is absent from the input log.
* ``unexpected`` – an output (key, seq) not in the input log (counted per pair), an output value
  without key/seq, or a copy whose ``op.input`` names no input record or one holding a different (key,
  seq) (counted per copy; such a copy pays for no input record). Examples say ``why``.
* ``aborted-input-read`` – an output (key, seq) not in the input log that the history records as a
  ``fail`` send: a record of an input transaction that aborted (the workload aborts some on purpose,
  ``--input-aborts``), which exists only for a read_uncommitted reader (KIP-98). Counted per pair,
  taken out of ``unexpected``; examples name the input transaction (``input_txn``) and its outcome
  (``input_outcome``). Likely cause: the Kafka source lacks ``kafka.isolation.level=read_committed``.
* ``nonmonotonic`` – per key and input partition, the output's *first* occurrences go backwards
  relative to the input order (a re-emitted copy is a ``duplicate``, not also a reordering). Kafka
  orders a key's records within one partition only, and Spark reads each partition in its own task: a
  key whose records span partitions (an input topic that grew, so its producer's partitioner mapped
  the key anew) has no order across them. With a fixed partition count a key lives in one partition,
  so this is per key. Output order is an order a user can read, never a physical one: the output's
  (partition, offset) (a topic's offsets, a table's ``id``), or, when the frame has an
  ``order_rank`` column (``sinks/base.py`` ``ORDER_RANK``: a Delta commit version, a file sink's batch),
  that rank, rows of one rank unordered among themselves; a frame whose ranks are all NA (a table with
  no order column) has no order, and ``nonmonotonic`` is not looked for (the result's ``order`` says
  ``not judged (no order column)``).
* ``input-duplicate`` – the same (key, seq) at two or more input offsets (counted as pairs;
  ``input-duplicate-records`` counts the extra input records). A fact about the input log, not the
  pipeline: the pipeline owes each copy once. Our workload sends each (key, seq) once through an
  idempotent producer, so with a workload history (any ``send`` op) it is a Kafka / client anomaly and
  definite; without one (``onceproof check`` on foreign topics, whose producers may legitimately resend)
  it is informational. Seen for real (at-least-once soak, seed 8: 1,182 pairs, each a run of 6 records
  written again 6 offsets later, one ``invoke`` and one ``ok`` each, at a ``kill-broker:leader``):
  librdkafka's idempotent producer can resend a possibly-persisted batch under a bumped epoch during a
  leader change, which the broker cannot deduplicate (confluentinc/librdkafka#4953, open). It is the
  input side's anomaly, named apart from the pipeline's ``duplicate``; the pipeline is still judged per
  input record.
* ``failed-write-visible`` – a send the history records as ``fail`` (definitely not written) whose
  (key, seq) is in the input log. Definite.

``info`` sends are neither required nor forbidden (Jepsen): only what reached the input log is owed.

Verdict: ``invalid`` if any definite anomaly (duplicate, unexpected, aborted-input-read, nonmonotonic, lost-write,
failed-write-visible, and input-duplicate when a workload history is present; the result's
``definite`` lists them) is found; otherwise ``unknown`` if recovery did not finish (``lost`` cannot be
told from "not yet"); otherwise ``invalid`` if anything is lost (``lost`` or ``lost-deleted``), else
``valid``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from onceproof.blocks import ROWS, row_blocks
from onceproof.checkers import examples
from onceproof.sinks.base import ORDER_RANK
from onceproof.store.columns import release_freed_memory

ANOMALIES = ("duplicate", "lost", "lost-deleted", "lost-write", "unexpected", "aborted-input-read",
             "nonmonotonic", "input-duplicate", "failed-write-visible")
DEFINITE = ("duplicate", "unexpected", "aborted-input-read", "nonmonotonic", "lost-write", "failed-write-visible")
DEFINITE_WITH_HISTORY = ("input-duplicate",)  # definite only when a workload history is present
MAX_EXAMPLES = 10
DELETED_BY = "deleted_by"
"""An input frame's optional column: for a record a fault deleted from the input log before the query
read it (``delete-input-records``, reconstructed from the history's ok send), what deleted it; NA for
the others. Such a record is owed like any other, and its loss is ``lost-deleted``, not ``lost``."""
INPUT_REF = "op.input"  # pipeline/provenance.py INPUT


@dataclass
class Recovery:
    """Whether the pipeline caught up before the check: ``finished`` false → verdict at best unknown."""

    finished: bool = True
    reasons: list[str] = field(default_factory=list)


def _prov_cols(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith("op.")]


_records = examples.records


def _norm(df: pd.DataFrame, need: tuple[str, ...]) -> pd.DataFrame:
    for c in need:
        if c not in df.columns:
            df = df.assign(**{c: pd.Series(dtype="object")})
    return df


def check(history: pd.DataFrame, input: pd.DataFrame, output: pd.DataFrame,
          recovery: Recovery | None = None) -> dict:
    """Check one run. Returns ``{"verdict", "valid", "counts", "anomalies", "stats", "unknown_reasons",
    "bad_keys", "definite", "order"}``; ``order`` says what the per-key order was judged by
    (:data:`ORDER_BY_POSITION`, :data:`ORDER_BY_RANK`) or :data:`NOT_JUDGED`; ``anomalies[name]`` holds
    up to 10 examples with provenance, ``counts`` exact totals (module docstring for each name's unit),
    ``definite`` the anomaly names that make this run invalid by themselves. ``stats`` adds to the record
    counts ``output_with_input_ref`` (output rows with a parsable ``op.input``).

    How (for speed: O(n) numpy passes plus one int64 sort; no merges, no per-row Python; numbers in
    docs/performance.md): keys are factorised once to int codes shared by the three frames (categorical
    columns' codes are used as they are); each (key, seq) becomes a dense int32 id (per key, ``seq``
    minus the key's smallest input seq, offset by the sizes of the keys before it; pairs outside the
    input's per-key range get extra ids by hashing), so the per-pair bookkeeping is ``bincount`` and
    table look-ups; the (partition, offset) order is an int64 position computed from two small
    per-partition tables when needed (:class:`_Places`); ``op.input`` is parsed by pyarrow's string
    kernels and looked up in a dense (partition, offset) → input row table; only the few example rows
    are turned back into Python objects.

    For memory (docs/performance.md, "Memory of the frames": 10M output records): per record the check
    keeps int32 pair ids, small key codes, int32 counters and masks, no int64 column copies (``seq`` and
    positions are converted :data:`_BLOCK` rows at a time where they are used), and frees each table once
    its step is done (each step below drops what the later ones do not read from the :class:`_Work` it
    shares with them); the history's part is done first and dropped before the output's pairing. Between
    the steps the freed heap pages are handed back to the OS (``onceproof.store.columns.release_freed_memory``:
    no effect on the result, a few ms each), so a step's holes do not add to the next one's resident size.
    """
    w = _start(history, input, output)
    _history_sends(w)
    _pair_ids_of(w)
    _lost_writes(w)
    release_freed_memory()
    _pair_output(w)
    release_freed_memory()
    _lost(w)
    _duplicates(w)
    release_freed_memory()
    _duplicate_examples(w)
    _unexpected(w)
    _input_duplicates(w)
    release_freed_memory()
    _nonmonotonic(w)
    return _result(w, recovery or Recovery())


class _Work:
    """The arrays one :func:`check` passes from step to step (each step sets what it makes and sets to
    ``None`` what no later step reads, so its memory is freed as soon as in one long function). Names as
    in the steps: ``k_*`` key codes, ``d_*`` dense (key, seq) ids, ``cnt_*`` copies per id, ``*_rows``
    row numbers; ``_in`` the input's rows with a seq, ``_out`` every output row, ``_h`` the history's
    ok / fail sends."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _start(history: pd.DataFrame, input: pd.DataFrame, output: pd.DataFrame) -> _Work:
    """Normalised frames, the input's rows with a seq, the output's parsable rows, the (partition, offset)
    orders, and the hashing work (key strings of the three frames, history op types) run in threads."""
    history = _norm(history, ("type", "f", "key", "seq"))
    input = _norm(input, ("key", "seq", "partition", "offset"))
    output = _norm(output, ("key", "seq", "partition", "offset"))
    in_na = input["seq"].isna().to_numpy(dtype=bool)
    inp = input[~in_na] if in_na.any() else input
    del in_na
    ok = output["seq"].notna().to_numpy(dtype=bool)  # its value had a seq
    n_bad = int(len(ok) - np.count_nonzero(ok))
    jobs = {"k_in": lambda: factorize_str(inp["key"]), "k_out": lambda: factorize_str(output["key"]),
            "k_h": lambda: factorize_str(history["key"]), "type": lambda: _small_codes(history["type"]),
            "send": lambda: (history["f"] == "send").to_numpy(dtype=bool)}
    done = _run_all(jobs, threaded=len(inp) + len(output) + len(history) >= _THREADS_FROM)
    return _Work(history=history, input=input, output=output, inp=inp, prov=_prov_cols(output), ok=ok,
                 n_bad=n_bad, any_bad=n_bad > 0, places_in=_Places(inp["partition"], inp["offset"]),
                 places_out=_Places(output["partition"], output["offset"]), done=done, counts={}, anomalies={})


def _history_sends(w: _Work) -> None:
    """The history's acknowledged (ok) and definitely failed (fail) sends: ``h_mask`` selects them (``h_all``:
    every row is one), ``h_fail`` marks the failed ones; ``tcount`` counts sends per type."""
    sends_mask = w.done.pop("send")
    w.has_workload = bool(sends_mask.any())
    tcodes, tuniq = w.done.pop("type")
    w.tcount = {str(t): int(np.count_nonzero((tcodes == i) & sends_mask)) for i, t in enumerate(tuniq)
                if isinstance(t, str) and t in ("ok", "fail", "info")}
    tlist = list(tuniq)
    ok_code = tlist.index("ok") if "ok" in w.tcount else -2
    fail_code = tlist.index("fail") if w.tcount.get("fail") else -2
    h_mask = sends_mask
    if fail_code == -2:
        h_mask &= tcodes == ok_code
    else:
        h_mask &= (tcodes == ok_code) | (tcodes == fail_code)
    w.h_all = bool(h_mask.all())  # else the ok / fail sends are the rows h_mask selects
    w.h_fail = None if fail_code == -2 else (tcodes == fail_code) if w.h_all else (tcodes == fail_code)[h_mask]
    w.h_mask = h_mask


def _pair_ids_of(w: _Work) -> None:
    """One key code space for the three frames (equal ``str(key)`` = equal code), then dense (key, seq)
    ids (:func:`_pair_ids`) and the input's copies per id."""
    done = w.done
    (w.k_in, w.k_out, k_h), w.keys = _unify_codes([done.pop("k_in"), done.pop("k_out"), done.pop("k_h")])
    w.done = None
    w.k_h = k_h if w.h_all else k_h[w.h_mask]
    w.nk = len(w.keys)
    w.d_in, w.d_out, w.d_h, w.n_ids = _pair_ids(w.nk, (w.k_in, w.inp["seq"], None),
                                                (w.k_out, w.output["seq"], w.ok),
                                                (w.k_h, w.history["seq"], None if w.h_all else w.h_mask))
    w.cnt_in = _bincount32(w.d_in, w.n_ids)
    w.multi_in = bool(len(w.d_in)) and w.cnt_in.max() > 1


def _lost_writes(w: _Work) -> None:
    """lost-write: acknowledged sends missing from the input log; failed-write-visible: sends that
    definitely failed, yet their (key, seq) is in the input log. Done first, so the history's arrays go."""
    history, h_mask, h_all, k_h, keys = w.history, w.h_mask, w.h_all, w.k_h, w.keys
    in_h = _at_compare(w.cnt_in, w.d_h, np.greater, 0)
    lw_rows = np.flatnonzero(~in_h if w.h_fail is None else ~in_h & ~w.h_fail)
    fv_rows = np.zeros(0, np.int64) if w.h_fail is None else np.flatnonzero(in_h & w.h_fail)
    # failed sends absent from the input (an aborted transaction's records): an output copy of one is
    # an aborted-input-read (:func:`_unexpected`)
    gone = np.zeros(0, np.int64) if w.h_fail is None else np.flatnonzero(~in_h & w.h_fail)
    w.fail_d, w.fail_hist = w.d_h[gone], (gone if h_all else _nth_true(h_mask, gone))
    del in_h, gone
    w.h_fail = None
    w.counts_h = {"lost-write": int(len(lw_rows)), "failed-write-visible": int(len(fv_rows))}
    lwx = lw_rows[:MAX_EXAMPLES]
    lw = history.iloc[lwx if h_all else _nth_true(h_mask, lwx)]
    lw = lw[["key", "seq"] + [c for c in ("partition", "offset") if c in lw.columns]].assign(
        key=keys[k_h[lwx]], seq=_int64(lw["seq"]))
    w.anomalies_h = {"lost-write": _records(lw, [c for c in ("key", "seq", "partition", "offset")
                                                 if c in lw.columns])}
    fvx = fv_rows[:MAX_EXAMPLES]
    fv_hist = fvx if h_all else _nth_true(h_mask, fvx)
    w.anomalies_h["failed-write-visible"] = _with_input_places(
        fvx, w.d_h, k_h, _int64(history["seq"].iloc[fv_hist]), keys, w.d_in, w.inp,
        history["error"].iloc[fv_hist] if "error" in history.columns else None)
    w.per_key_h = {"lost-write": k_h[lw_rows], "failed-write-visible": k_h[fv_rows]}
    w.d_h = w.k_h = w.h_mask = None


def _pair_output(w: _Work) -> None:
    """Pair each output copy with an input record: by its ``op.input`` (``ref[i]``: the input row output
    row i names, -1 when it names none, -2 without one) when any copy has one, else by (key, seq).
    Sets ``n_free`` (unpaired copies per id), ``unclaimed`` (input records no op.input claimed, per id),
    ``unpaid`` (per input row, or ``None`` without op.input), ``twice`` (input rows named by two or
    more copies) and ``extra_named`` (the copies beyond the first of those)."""
    output, inp = w.output, w.inp
    ref = _input_refs(output[INPUT_REF], inp["partition"], inp["offset"], w.places_in) \
        if INPUT_REF in output.columns else None
    w.twice = np.zeros(0, np.int64)
    w.extra_named = 0
    w.by_ref = ref is not None and bool((ref >= -1).any())
    if not w.by_ref:
        del ref
        w.n_ref = 0
        w.mismatch = w.mis_named = np.zeros(0, np.int64)
        w.unpaid = None
        w.cnt_out = _bincount32(w.d_out, w.n_ids, w.ok if w.any_bad else None)
        w.n_free = w.cnt_out  # every copy is paired by (key, seq)
        w.unclaimed = w.cnt_in
        return
    release_freed_memory()  # op.input's parse temporaries, before the pairing tables are made
    w.n_ref, free, claimed, w.mismatch, w.mis_named = _claims(ref, w.ok, w.d_in, w.d_out)
    del ref
    # copies per input record, by op.input, a chunk of records at a time (no int per record is kept)
    w.unpaid = np.empty(len(w.d_in), bool)
    twice = []
    for lo, hi, per_rec in _count_chunks(claimed, len(w.d_in)):
        np.equal(per_rec, 0, out=w.unpaid[lo:hi])
        t = np.flatnonzero(per_rec > 1)
        w.extra_named += int((per_rec[t] - 1).sum(dtype=np.int64))
        twice.append(t + lo)
        del per_rec
    del claimed
    w.twice = np.concatenate(twice) if twice else np.zeros(0, np.int64)
    del twice
    w.n_free = _bincount32(w.d_out, w.n_ids, free)
    del free
    w.unclaimed = _bincount32(w.d_in, w.n_ids, w.unpaid)
    w.cnt_out = None  # counted once the pairing tables are gone


def _lost(w: _Work) -> None:
    """lost: input records no copy paid for."""
    if w.unpaid is None and not w.multi_in:
        w.lost_rows = np.flatnonzero(_at_compare(w.cnt_out, w.d_in, np.equal, 0))
    else:
        w.lost_rows = _lost_rows(w.d_in, w.places_in, w.unpaid, w.unclaimed, w.n_free)
    w.unpaid = None
    inp = w.inp
    w.deleted_rows = np.zeros(0, np.int64)
    if DELETED_BY in inp.columns:  # records a fault deleted from the input before the query read them
        by = inp[DELETED_BY].to_numpy(dtype=object)[w.lost_rows]
        gone = pd.notna(by)
        w.deleted_rows, w.lost_rows = w.lost_rows[gone], w.lost_rows[~gone]
    for name, rows in (("lost", w.lost_rows), ("lost-deleted", w.deleted_rows)):
        w.counts[name] = int(len(rows))
        lex = _earliest(rows, w.places_in)
        lp, lo_ = inp["partition"].iloc[lex].tolist(), inp["offset"].iloc[lex].tolist()
        w.anomalies[name] = [{"key": w.keys[w.k_in[r]], "seq": int(s), "input_partition": int(p),
                              "input_offset": int(o)}
                             for r, s, p, o in zip(lex, _int64(inp["seq"].iloc[lex]), lp, lo_)]
        if name == "lost-deleted":
            for ex, r in zip(w.anomalies[name], lex):
                ex["deleted_by"] = inp[DELETED_BY].iloc[r]


def _duplicates(w: _Work) -> None:
    """duplicate: per pair, copies beyond what the input owes (``dup_pair`` per id, ``extra`` copies)."""
    if not w.by_ref and not w.multi_in:
        w.dup_pair = w.cnt_out > 1
        w.extra = int(w.cnt_out[w.dup_pair].sum(dtype=np.int64) - np.count_nonzero(w.dup_pair))
    else:
        # unpaired copies beyond what the pair can absorb (its unclaimed input records; 1 for a pair not
        # in the input, whose every copy after the first is a duplicate too), in place: the pairing
        # tables are not needed after this
        excess = w.n_free if w.n_free is not w.cnt_out else w.n_free.copy()
        w.n_free = None
        excess -= w.unclaimed
        w.unclaimed = None
        if w.cnt_out is None:
            w.cnt_out = _bincount32(w.d_out, w.n_ids, w.ok if w.any_bad else None)
        absent = w.cnt_in == 0
        excess[absent] = w.cnt_out[absent] - 1
        del absent
        np.maximum(excess, 0, out=excess)
        w.dup_pair = excess > 0
        w.extra = int(excess.sum(dtype=np.int64))
        del excess
        w.dup_pair[w.d_in[w.twice]] = True
        w.extra += w.extra_named
    w.n_free = w.unclaimed = None


def _duplicate_examples(w: _Work) -> None:
    """The first output occurrence of each pair (``is_first``, for unexpected, nonmonotonic and the
    examples) and the first 10 duplicated pairs, in order of first appearance, with every copy."""
    output, places_out, d_out = w.output, w.places_out, w.d_out
    multi = _at_compare(w.cnt_out, d_out, np.greater, 1)
    multi &= w.ok
    multi_rows = np.flatnonzero(multi)
    del multi
    w.is_first = w.ok.copy()
    if len(multi_rows):
        w.is_first[multi_rows] = _first_of_pair(d_out[multi_rows], places_out.at(multi_rows))
    w.in_input = _at_compare(w.cnt_in, d_out, np.greater, 0)
    w.counts["duplicate"] = int(np.count_nonzero(w.dup_pair))
    w.counts["duplicate-records"] = w.extra
    dup_rows = multi_rows[w.dup_pair[d_out[multi_rows]]]
    w.dup_pair = None
    del multi_rows
    w.dup_first = dup_rows[w.is_first[dup_rows]]
    ex = []
    if len(w.dup_first):
        chosen = _earliest(w.dup_first, places_out)  # first 10 pairs, in order of first appearance
        rows = dup_rows[np.isin(d_out[dup_rows], d_out[chosen])]
        rows = rows[np.argsort(places_out.at(rows), kind="stable")]
        copies = output.iloc[rows]
        rd = d_out[rows]
        for r, s in zip(chosen, _int64(output["seq"].iloc[chosen])):
            grp = copies[rd == d_out[r]]
            ex.append({"key": w.keys[w.k_out[r]], "seq": int(s),
                       "copies": _records(grp, ["partition", "offset", *w.prov])})
    w.anomalies["duplicate"] = ex


def _unexpected(w: _Work) -> None:
    """unexpected: pairs not in the input (first occurrences), unparseable values, and copies whose
    op.input names no input record or another (key, seq) (when their own pair is in the input: else the
    pair already counts)."""
    output, places_out, keys, k_out = w.output, w.places_out, w.keys, w.k_out
    w.unexp_rows = np.flatnonzero(w.is_first & ~w.in_input)
    _aborted_input_reads(w)
    keep_mis = w.in_input[w.mismatch] if len(w.mismatch) else np.zeros(0, bool)
    w.mis_rows, mis_named = w.mismatch[keep_mis], w.mis_named[keep_mis]
    w.counts["unexpected"] = int(len(w.unexp_rows) + len(w.mis_rows) + w.n_bad)
    uex = _earliest(w.unexp_rows, places_out)
    ux = _records(_with_key_seq(output, uex, keys[k_out[uex]]).assign(why="not in the input"),
                  ["key", "seq", "partition", "offset", "why", *w.prov])
    if len(w.mis_rows) and len(ux) < MAX_EXAMPLES:
        o = _earliest_at(w.mis_rows, places_out, MAX_EXAMPLES - len(ux))
        mx = w.mis_rows[o]
        why = [f"op.input names input {_named_desc(keys, w.k_in, w.inp, n)}" for n in mis_named[o]]
        ux += _records(_with_key_seq(output, mx, keys[k_out[mx]]).assign(why=why),
                       ["key", "seq", "partition", "offset", "why", *w.prov])
    if w.n_bad and len(ux) < MAX_EXAMPLES:
        bex = _earliest(np.flatnonzero(~w.ok), places_out, MAX_EXAMPLES - len(ux))
        ux += _records(output.iloc[bex].assign(why="value without key/seq"),
                       ["key", "partition", "offset", "why", *w.prov])
    w.anomalies["unexpected"] = ux


def _aborted_input_reads(w: _Work) -> None:
    """aborted-input-read: the pairs of ``w.unexp_rows`` (output pairs not in the input) that the history
    records as ``fail`` sends (``w.fail_d``: an aborted input transaction's records, which exist only at
    read_uncommitted) move to ``w.air_rows``; examples name the input transaction (the send op's
    ``txn``) and its outcome (its ``error``)."""
    w.air_rows = np.zeros(0, np.int64)
    if len(w.fail_d) and len(w.unexp_rows):
        failed = np.zeros(w.n_ids, bool)
        failed[w.fail_d] = True
        air = failed[w.d_out[w.unexp_rows]]
        w.air_rows, w.unexp_rows = w.unexp_rows[air], w.unexp_rows[~air]
    w.counts["aborted-input-read"] = int(len(w.air_rows))
    w.anomalies["aborted-input-read"] = []
    if not len(w.air_rows):
        w.fail_d = w.fail_hist = None
        return
    rows = _earliest(w.air_rows, w.places_out)
    d = w.d_out[rows]
    first = {}
    for i in np.flatnonzero(np.isin(w.fail_d, d))[::-1]:
        first[int(w.fail_d[i])] = int(w.fail_hist[i])
    h = w.history
    hrows = [first[int(x)] for x in d]
    ex = _with_key_seq(w.output, rows, w.keys[w.k_out[rows]]).assign(
        input_txn=h["txn"].iloc[hrows].to_numpy() if "txn" in h.columns else None,
        input_outcome=h["error"].iloc[hrows].to_numpy() if "error" in h.columns else None)
    w.anomalies["aborted-input-read"] = _records(ex, ["key", "seq", "partition", "offset", "input_txn",
                                                      "input_outcome", *w.prov])
    w.fail_d = w.fail_hist = None


def _input_duplicates(w: _Work) -> None:
    """input-duplicate: one (key, seq) at several input offsets. Also keeps, for :func:`_nonmonotonic`,
    ``seen`` (first output occurrences of pairs in the input) and ``first_in`` (each id's first input
    position)."""
    w.seen = w.is_first
    w.seen &= w.in_input
    w.in_input = w.is_first = w.cnt_out = w.ok = None
    d_in, inp = w.d_in, w.inp
    w.first_in, in_first = _first_positions(d_in, w.places_in, w.n_ids, w.multi_in)
    if w.multi_in:
        multi = _at_compare(w.cnt_in, d_in, np.greater, 1)
        multi &= in_first
        w.idup_first = np.flatnonzero(multi)
        del multi
        w.counts["input-duplicate"] = int(len(w.idup_first))
        w.counts["input-duplicate-records"] = int(np.count_nonzero(~in_first))
        ix = _earliest(w.idup_first, w.places_in)
        w.anomalies["input-duplicate"] = _with_input_places(
            ix, d_in, w.k_in, _int64(inp["seq"].iloc[ix]), w.keys, d_in, inp, None, all_places=True)
    else:
        w.idup_first = np.zeros(0, np.int64)
        w.counts["input-duplicate"] = w.counts["input-duplicate-records"] = 0
        w.anomalies["input-duplicate"] = []
    del in_first
    w.part_of = _partition_of_ids(d_in, inp["partition"], w.n_ids)
    del d_in
    w.cnt_in = w.d_in = None


def _partition_of_ids(d_in: np.ndarray, partition: pd.Series, n_ids: int) -> np.ndarray | None:
    """Per pair id, a code of the input partition holding it (a pair at several input places: any one of
    them), or ``None`` when the input has one partition (or none). Codes in the smallest int type that
    holds them (int8 for up to 128 partitions)."""
    if not len(d_in):
        return None
    if _is_exact_int(partition):
        lo = min(int(_int_rows(partition, slice(a, b)).min()) for a, b in _blocks(len(d_in)))
        hi = max(int(_int_rows(partition, slice(a, b)).max()) for a, b in _blocks(len(d_in)))
        if hi == lo:
            return None
        out = np.zeros(n_ids, _small_int(hi - lo))
        for a, b in _blocks(len(d_in)):
            out[d_in[a:b]] = _int_rows(partition, slice(a, b)) - lo
        return out
    codes, uniq = pd.factorize(partition)
    if len(uniq) < 2:
        return None
    out = np.zeros(n_ids, _small_int(len(uniq) - 1))
    out[d_in] = codes
    return out


def _small_int(top: int) -> type:
    """The smallest signed int type holding ``0..top``."""
    return np.int8 if top < (1 << 7) else np.int16 if top < (1 << 15) else np.int32 if top < (1 << 31) else np.int64


def _order_groups(k_out: np.ndarray, seen: np.ndarray, d_out: np.ndarray, part_of: np.ndarray | None
                  ) -> np.ndarray:
    """Per output row, the group whose rows keep the input's order: the key code, or with several input
    partitions ``key code × partitions + the input partition of the row's pair`` (rows not ``seen``: 0),
    int32 when every group fits (else int64), computed :data:`_BLOCK` rows at a time."""
    if part_of is None:
        return k_out
    nparts = int(part_of.max()) + 1
    top = (int(k_out.max()) + 1) * nparts - 1 if len(k_out) else 0
    g = np.zeros(len(k_out), np.int32 if top < (1 << 31) else np.int64)
    for a, b in _blocks(len(k_out)):
        rows = np.flatnonzero(seen[a:b])
        rows += a
        v = k_out[rows].astype(g.dtype)
        v *= nparts
        v += part_of[d_out[rows]]
        g[rows] = v
    return g


ORDER_BY_POSITION = "output position"
ORDER_BY_RANK = "order rank"
NOT_JUDGED = "not judged (no order column)"


def order_unjudged(result: dict) -> str | None:
    """Why a result's per-key order was not judged (:data:`NOT_JUDGED`: an output with no order a user can
    read), or ``None`` when it was (or the result predates the ``order`` key)."""
    return NOT_JUDGED if result.get("order") == NOT_JUDGED else None


def _output_order(w: _Work) -> _Places | None:
    """The positions the per-key order is judged by (sets ``w.order``, a :data:`ORDER_BY_POSITION` /
    :data:`ORDER_BY_RANK` / :data:`NOT_JUDGED` note): the output's (partition, offset) without an
    :data:`~onceproof.sinks.base.ORDER_RANK` column; with one, (rank, the pair's first input place), so
    that rows of one rank, which have no order among themselves, are taken in input order and only a
    later rank holding an earlier input record goes back (rows without a rank drop out of ``w.seen``);
    ``None`` when no row has a rank: nothing to judge."""
    if ORDER_RANK not in w.output.columns:
        w.order = ORDER_BY_POSITION
        return w.places_out
    rank = w.output[ORDER_RANK]
    has = rank.notna().to_numpy(dtype=bool)
    if not has.any():
        w.order = NOT_JUDGED
        return None
    w.order = ORDER_BY_RANK
    w.seen = w.seen & has
    tie = np.zeros(len(rank), np.int64)
    rows = np.flatnonzero(w.seen)
    tie[rows] = w.first_in[w.d_out[rows]]
    return _Places(pd.Series(rank.fillna(-1).to_numpy(dtype=np.int64)), pd.Series(tie))


def _nonmonotonic(w: _Work) -> None:
    """nonmonotonic: per key and input partition (:func:`_order_groups`), first occurrences in output order
    (:func:`_output_order`) whose input position goes back; none looked for in an output with no order."""
    places = _output_order(w)
    if places is None:
        w.back_rows, prev_rows = np.zeros(0, np.int64), np.zeros(0, np.int64)
    else:
        groups = _order_groups(w.k_out, w.seen, w.d_out, w.part_of)
        w.back_rows, prev_rows = _backwards(groups, places, w.seen, w.d_out, w.first_in)
        del groups
    w.seen = w.first_in = w.d_out = w.part_of = None
    w.counts["nonmonotonic"] = int(len(w.back_rows))
    if len(w.back_rows):
        output = w.output
        o = np.argsort(places.at(w.back_rows), kind="stable")[:MAX_EXAMPLES]
        bx = w.back_rows[o]
        back = _with_key_seq(output, bx, w.keys[w.k_out[bx]])
        back = back.assign(prev_seq=_int64(output["seq"].iloc[prev_rows[o]]))
        rank = [ORDER_RANK] if ORDER_RANK in output.columns else []
        w.anomalies["nonmonotonic"] = _records(back, ["key", "seq", "prev_seq", "partition", "offset", *rank,
                                                      *w.prov])
    else:
        w.anomalies["nonmonotonic"] = []
    w.counts.update(w.counts_h)
    w.anomalies.update(w.anomalies_h)


def _result(w: _Work, recovery: Recovery) -> dict:
    """The verdict (module docstring), the bad keys and the stats, as :func:`check` returns them."""
    counts, anomalies, keys, k_in, k_out = w.counts, w.anomalies, w.keys, w.k_in, w.k_out
    definite = DEFINITE + (DEFINITE_WITH_HISTORY if w.has_workload else ())
    if any(counts[a] for a in definite):
        verdict = "invalid"
    elif not recovery.finished:
        verdict = "unknown"
    elif counts["lost"] or counts["lost-deleted"]:
        verdict = "invalid"
    else:
        verdict = "valid"
    per_key = {"duplicate": k_out[w.dup_first], "lost": k_in[w.lost_rows], "lost-deleted": k_in[w.deleted_rows],
               "unexpected": np.concatenate([k_out[w.unexp_rows], k_out[w.mis_rows]]),
               "aborted-input-read": k_out[w.air_rows],
               "nonmonotonic": k_out[w.back_rows], **w.per_key_h, "input-duplicate": k_in[w.idup_first]}
    bad_keys = _bad_keys({name: _per_key(codes, keys) for name, codes in per_key.items() if len(codes)})
    tcount = w.tcount
    stats = {
        "input_records": int(len(w.input)), "output_records": int(len(w.output)),
        "keys": int(np.count_nonzero(np.bincount(k_in, minlength=w.nk))),
        "sends_ok": tcount.get("ok", 0), "sends_fail": tcount.get("fail", 0),
        "sends_info": tcount.get("info", 0), "output_with_input_ref": w.n_ref,
    }
    return {"verdict": verdict, "valid": {"valid": True, "invalid": False}.get(verdict, "unknown"),
            "counts": {k: counts[k] for k in COUNT_ORDER}, "anomalies": {k: anomalies[k] for k in EXAMPLE_ORDER},
            "stats": stats, "unknown_reasons": list(recovery.reasons) if not recovery.finished else [],
            "bad_keys": bad_keys, "definite": list(definite), "order": w.order}


COUNT_ORDER = ("lost", "lost-deleted", "duplicate", "duplicate-records", "unexpected", "aborted-input-read",
               "nonmonotonic", "lost-write", "failed-write-visible", "input-duplicate", "input-duplicate-records")
EXAMPLE_ORDER = ("lost", "lost-deleted", "duplicate", "unexpected", "aborted-input-read", "nonmonotonic", "lost-write",
                 "failed-write-visible",
                 "input-duplicate")


# ----------------------------------------------------------------------------------------------------
# pairing helpers

def _lost_rows(d_in: np.ndarray, places_in: _Places, unpaid: np.ndarray | None, unclaimed: np.ndarray,
               n_free: np.ndarray) -> np.ndarray:
    """Input rows no copy paid for: rows no ``op.input`` claimed (``unpaid``; all rows when None), minus,
    per pair, the first ``n_free`` of them in (partition, offset) order (paid by unpaired copies)."""
    if unpaid is not None:
        rows = np.flatnonzero(unpaid)
        d = d_in[rows]
        short = unclaimed[d] > n_free[d]  # this pair has fewer unpaired copies than unclaimed records
        rows, d = rows[short], d[short]
    else:
        short = unclaimed[d_in] > n_free[d_in]
        rows = np.flatnonzero(short)
        d = d_in[rows]
    if not len(rows):
        return rows
    nf = n_free[d]
    simple = nf == 0  # nothing to share out: every unclaimed record of the pair is lost
    if simple.all():
        return rows
    # pairs with some unpaired copies: the earliest unclaimed records are paid, the rest lost
    part, sd = rows[~simple], d[~simple]
    o = np.lexsort((places_in.at(part), sd))
    part, sd = part[o], sd[o]
    start = np.r_[0, np.flatnonzero(sd[1:] != sd[:-1]) + 1]
    rank = np.arange(len(part)) - np.repeat(start, np.diff(np.r_[start, len(part)]))
    return np.sort(np.concatenate([rows[simple], part[rank >= n_free[sd]]]))


def _first_of_pair(d: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """For rows with pair ids ``d`` and positions ``pos`` (unique): whether each is its pair's first."""
    o = np.lexsort((pos, d))
    first = np.zeros(len(d), bool)
    ds = d[o]
    first[o[np.r_[True, ds[1:] != ds[:-1]]]] = True
    return first


def _claims(ref: np.ndarray, ok: np.ndarray, d_in: np.ndarray, d_out: np.ndarray
            ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the output rows' ``op.input`` say (``ref``, from :func:`_input_refs`), a block at a time:
    ``(rows carrying one, free, claimed, mismatch, named)``: ``free`` marks the rows with a seq and no
    ``op.input`` (paired by (key, seq)); ``claimed`` lists the input row of every copy whose ``op.input``
    names an input record holding its (key, seq); ``mismatch`` are the copies naming no input record
    or one holding another (key, seq), ``named`` the input row each names (-1: none)."""
    n_ref = 0
    free = np.empty(len(ref), bool)
    claimed = np.empty(len(ref), ref.dtype)
    at = 0
    mism, named = [], []
    for a, b in _blocks(len(ref)):
        r = ref[a:b]
        has = r >= -1
        n_ref += int(np.count_nonzero(has))
        free[a:b] = ok[a:b] & ~has
        has &= ok[a:b]
        rows = np.flatnonzero(has)
        rr = r[rows]
        same = rr >= 0
        same &= d_in[np.where(same, rr, 0)] == d_out[a:b][rows]
        c = rr[same]
        claimed[at:at + len(c)] = c
        at += len(c)
        mism.append(rows[~same] + a)
        named.append(rr[~same])
    return n_ref, free, claimed[:at], np.concatenate(mism) if mism else np.zeros(0, np.int64), \
        np.concatenate(named) if named else np.zeros(0, np.int64)


def _first_positions(d_in: np.ndarray, places_in: _Places, n_ids: int, multi_in: bool
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """Per pair id, where its first input occurrence is (an order-equivalent of the position within a
    key: the int32 place when the input's places are unique and fit, else the int64 position), and,
    when a pair can occur twice (``multi_in``), whether each input row is its pair's first."""
    small = places_in.unique_small()
    at = places_in.place_at if small else places_in.at
    dtype = np.int32 if small else np.int64
    first_in = np.full(n_ids, np.iinfo(dtype).max, dtype) if multi_in else np.zeros(n_ids, dtype)
    for a, b in _blocks(len(d_in)):
        if multi_in:
            np.minimum.at(first_in, d_in[a:b], at(slice(a, b)).astype(dtype, copy=False))
        else:
            first_in[d_in[a:b]] = at(slice(a, b))
    if not multi_in:
        return first_in, None
    in_first = np.empty(len(d_in), bool)
    for a, b in _blocks(len(d_in)):
        in_first[a:b] = first_in[d_in[a:b]] == at(slice(a, b))
    return first_in, in_first


def _backwards(k_out: np.ndarray, places_out: _Places, seen: np.ndarray, d_out: np.ndarray,
               first_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``seen`` (first occurrences of input pairs) whose pair's first input place is below the
    previous one's of the same key, in (key, output position) order; and those previous rows.

    Keys are taken in ranges of about ``4 * _BLOCK`` seen rows (a key's rows are never split), in key
    order, so that nothing per seen row is bigger than one range (plus one key's rows). Per range, one
    int64 per seen row, ``(key code - the range's first) << bits | position``, sorted in place; the
    comparison then goes :data:`_BLOCK` rows at a time (the row is the position's low bits). A range
    whose keys and positions do not fit 63 bits together sorts its row indices by (key, position)
    instead."""
    n = int(np.count_nonzero(seen))
    none = np.zeros(0, np.int64)
    if n < 2:
        return none, none
    pbits = places_out.bits
    rowmask = (1 << places_out.b) - 1
    per_key = np.zeros(int(k_out.max()) + 1, np.int64)
    for a, b in _blocks(len(seen)):
        per_key += np.bincount(k_out[a:b][seen[a:b]], minlength=len(per_key))
    cum = np.cumsum(per_key)
    cuts = np.unique(np.searchsorted(cum, np.arange(4 * _BLOCK, n, 4 * _BLOCK), side="left"))
    groups = zip(np.r_[0, cuts + 1], np.r_[cuts + 1, len(per_key)])  # key code ranges [lo, hi)
    back, prev = [], []
    for klo, khi in groups:
        klo, khi = int(klo), int(khi)
        size = int(cum[khi - 1] - (cum[klo - 1] if klo else 0))
        if size < 2:
            continue
        packs = (khi - 1 - klo).bit_length() + pbits <= 63
        packed = np.empty(size, np.int64)
        at = 0
        for a, b in _blocks(len(seen)):
            k = k_out[a:b]
            r = np.flatnonzero(seen[a:b] & (k >= klo) & (k < khi))
            r += a
            if packs:
                v = k_out[r].astype(np.int64)
                v -= klo
                v <<= pbits
                v |= places_out.at(r)
            else:
                v = r
            packed[at:at + len(v)] = v
            at += len(v)
        if packs:
            packed.sort()
            for a, b in _blocks(size - 1):
                blk = packed[a:b + 1]
                same = (blk[1:] >> pbits) == (blk[:-1] >> pbits)
                rows = blk & rowmask
                rk = first_in[d_out[rows]]
                same &= rk[1:] < rk[:-1]
                back.append(rows[1:][same])
                prev.append(rows[:-1][same])
        else:  # too wide to pack: sort the range's row indices instead
            rows = packed[np.lexsort((places_out.at(packed), k_out[packed]))]
            ks = k_out[rows]
            rk = first_in[d_out[rows]]
            back_m = (ks[1:] == ks[:-1]) & (rk[1:] < rk[:-1])
            back.append(rows[1:][back_m])
            prev.append(rows[:-1][back_m])
        del packed
    return (np.concatenate(back), np.concatenate(prev)) if back else (none, none)


def _input_refs(ref: pd.Series, in_part: pd.Series, in_off: pd.Series, places_in: _Places) -> np.ndarray:
    """Per output row, the input row its ``op.input`` (``"<partition>:<offset>"``) names: its index in
    ``in_part`` / ``in_off``, -1 when no input row has that (partition, offset) (the last row of a
    repeated place), -2 when the value is missing or not two non-negative integers joined by ``:``.
    int32 (int64 beyond 2**31 input rows). Parsed and looked up :data:`_REF_BLOCK` rows at a time (the
    string kernels' temporaries are a few times the strings') in a dense place → row table
    (``places_in.row_table``) when the input's offsets are dense, else hashed."""
    n = len(ref)
    out = np.full(n, -2, np.int32 if len(in_part) < (1 << 31) else np.int64)
    table = places_in.row_table()
    cats = None
    if isinstance(ref.dtype, pd.CategoricalDtype):  # parsed once per category
        cats = _parse_refs(pd.Series(np.asarray(ref.cat.categories, dtype=object)))
        codes = ref.cat.codes.to_numpy()
    hashed = None
    for a, b in _blocks(n, _REF_BLOCK):
        if cats is None:
            ok, p, o = _parse_refs(ref.iloc[a:b])
        else:
            c = codes[a:b]
            has = c >= 0
            c = np.where(has, c, 0)
            ok = has & cats[0][c] if len(cats[0]) else np.zeros(b - a, bool)
            p = cats[1][c] if len(cats[1]) else np.zeros(b - a, np.int64)
            o = cats[2][c] if len(cats[2]) else np.zeros(b - a, np.int64)
        if not ok.any():
            continue
        every = bool(ok.all())
        qp, qo = (p, o) if every else (p[ok], o[ok])
        if table is not None:
            found = places_in.lookup(table, qp, qo)
        else:
            if hashed is None:
                hashed = _PlaceIndex(_as_int(in_part), _as_int(in_off))
            found = hashed.lookup(qp, qo)
        if every:
            out[a:b] = found
        else:
            out[a:b][ok] = found
    return out


def _parse_refs(s: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``"<p>:<o>"`` strings → (valid mask, p, o) as int64 arrays (0 where invalid), with pyarrow's
    string kernels (no per-row Python). Categoricals are parsed once per category."""

    n = len(s)
    if isinstance(s.dtype, pd.CategoricalDtype):
        cok, cp, co = _parse_refs(pd.Series(np.asarray(s.cat.categories, dtype=object)))
        codes = s.cat.codes.to_numpy()
        has = codes >= 0
        c = np.where(has, codes, 0)
        return (has & cok[c]) if len(cok) else np.zeros(n, bool), cp[c] if len(cp) else np.zeros(n, np.int64), \
            co[c] if len(co) else np.zeros(n, np.int64)
    try:
        arr = pa.array(s, from_pandas=True, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # non-str objects: only the str values can be refs
        vals = s.to_numpy(dtype=object)
        is_str = np.fromiter((type(v) is str for v in vals), bool, len(vals))
        arr = pa.array(np.where(is_str, vals, None), type=pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    parts = pc.split_pattern(arr, ":", max_splits=1)
    two = pc.fill_null(pc.equal(pc.list_value_length(parts), 2), False).to_numpy(zero_copy_only=False)
    ok = np.zeros(n, bool)
    p = np.zeros(n, np.int64)
    o = np.zeros(n, np.int64)
    if not two.any():
        return ok, p, o
    # the pieces of the rows split in two, interleaved: p0, o0, p1, o1, ...
    flat = pc.list_flatten(parts if two.all() else pc.filter(parts, pa.array(two)))
    # non-empty, ASCII 0-9 only (Arrow's int cast would also take "0x.." hex), short enough for int64
    dec = pc.and_(pc.ascii_is_decimal(flat), pc.less_equal(pc.binary_length(flat), 18))
    dec_np = dec.to_numpy(zero_copy_only=False)
    if not dec_np.all():
        flat = pc.if_else(dec, flat, pa.scalar("0"))
    nums = pc.cast(flat, pa.int64()).to_numpy()
    if two.all() and dec_np.all():  # the usual case: every row is a ref
        return np.ones(n, bool), nums[0::2], nums[1::2]
    rows = np.flatnonzero(two)
    ok[rows] = dec_np[0::2] & dec_np[1::2]
    p[rows], o[rows] = nums[0::2], nums[1::2]
    return ok, p, o


def _as_int(s: pd.Series) -> np.ndarray:
    """An int64 column as a numpy array; NA or non-integers → -1 (never matched by a ref)."""
    x = _exact_int(s)
    if x is not None:
        return x
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    good = np.isfinite(v) & (v == np.round(v))
    return np.where(good, v, -1).astype(np.int64)


class _PlaceIndex:
    """(partition, offset) → the last input row holding it, by hashing: for the input places
    :class:`_Places` cannot table (non-integer columns, NA, sparse offsets). Built once, looked up a
    block at a time. ``in_p`` / ``in_o`` from ``_as_int`` (-1: NA or not an integer, never matched)."""

    def __init__(self, in_p: np.ndarray, in_o: np.ndarray):
        valid = (in_p >= 0) & (in_o >= 0)
        index = pd.MultiIndex.from_arrays([in_p[valid], in_o[valid]])
        last = ~index.duplicated(keep="last")
        self.index, self.rows = index[last], np.flatnonzero(valid)[last]

    def lookup(self, qp: np.ndarray, qo: np.ndarray) -> np.ndarray:
        """The row holding each (``qp``, ``qo``); -1 when none."""
        at = self.index.get_indexer(pd.MultiIndex.from_arrays([qp, qo]))
        return np.where(at >= 0, self.rows[np.maximum(at, 0)] if len(self.rows) else -1, -1)


def _named_desc(keys: np.ndarray, k_in: np.ndarray, inp: pd.DataFrame, row: int) -> str:
    return "(no such input record)" if row < 0 else \
        f"holding ({keys[k_in[row]]}, {int(_int64(inp['seq'].iloc[[row]])[0])})"


def _with_input_places(rows: np.ndarray, d_rows: np.ndarray, k_rows: np.ndarray, seqs: np.ndarray,
                       keys: np.ndarray, d_in: np.ndarray, inp: pd.DataFrame, errors: pd.Series | None,
                       all_places: bool = False) -> list[dict]:
    """Examples for ``rows`` (of a frame whose pair ids are ``d_rows`` and key codes ``k_rows`` into
    ``keys``; ``seqs``: the rows' seqs, in the order of ``rows``): key, seq, the input place of the
    pair (``input_partition`` / ``input_offset``: its last occurrence, so ``nearby`` times the newest
    copy), ``inputs`` (every input place) when ``all_places``, and ``error`` when given. Only the example
    pairs are looked up (one ``isin`` pass)."""
    if not len(rows):
        return []
    want = d_rows[rows]
    hit = np.flatnonzero(np.isin(d_in, want))
    hp, ho = inp["partition"].iloc[hit].to_numpy(), inp["offset"].iloc[hit].to_numpy()
    places: dict[int, list[tuple[int, int]]] = {}
    for d, p, o in zip(d_in[hit].tolist(), hp.tolist(), ho.tolist()):
        places.setdefault(d, []).append((int(p), int(o)))
    errs = errors.tolist() if errors is not None else [None] * len(rows)
    out = []
    for r, d, s, e in zip(rows.tolist(), want.tolist(), np.asarray(seqs).tolist(), errs):
        pl = sorted(places.get(d, []))
        ex = {"key": keys[k_rows[r]], "seq": int(s)}
        if pl:
            ex["input_partition"], ex["input_offset"] = pl[-1]
        if all_places:
            ex["inputs"] = [{"partition": p, "offset": o} for p, o in pl]
        if e is not None and not examples.isna(e):
            ex["error"] = e
        out.append(ex)
    return out


# ----------------------------------------------------------------------------------------------------
# vectorised helpers

_THREADS_FROM = 1_000_000  # rows; below, threads cost more than they save
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min
_BLOCK = ROWS
"""Rows converted at a time where a whole-column int64 copy would only be a temporary (seq, positions,
op.input): at 10M rows it bounds each such temporary to 8 MiB instead of 80 MiB."""


_REF_BLOCK = 1 << 17
"""Rows of ``op.input`` parsed at a time: pyarrow's split/cast temporaries take ~100 bytes per row."""


def _blocks(n: int, size: int | None = None):
    """``(start, stop)`` row ranges of ``size`` (default :data:`_BLOCK`) rows covering ``0..n``."""
    return row_blocks(n, size or _BLOCK)


def _bincount32(d: np.ndarray, n: int, mask: np.ndarray | None = None) -> np.ndarray:
    """``np.bincount(d[mask], minlength=n)`` as int32 (int64 when a count does not fit): a pair is seen
    at most a few times, and small counters halve the tables' memory and traffic. Counted a chunk of ids
    at a time (:func:`_count_chunks`), so neither ``d[mask]``, a mask of every row nor ``bincount``'s int64
    result is ever a whole-table temporary."""
    if len(d) >= (1 << 31):
        return np.bincount(d if mask is None else d[mask], minlength=n)
    out = np.empty(n, np.int32)
    for lo, hi, c in _count_chunks(d, n, mask):
        out[lo:hi] = c
    return out


def _count_chunks(d: np.ndarray, n: int, mask: np.ndarray | None = None):
    """``(lo, hi, counts)`` covering ids ``0..n`` in order: ``counts`` (int64) is
    ``np.bincount(d[mask], minlength=n)[lo:hi]``. Ids are counted ``2 * _BLOCK`` at a time, their rows
    picked :data:`_BLOCK` rows at a time (all at once when both the ids and the rows are that few)."""
    span = 2 * _BLOCK
    if n <= span and (mask is None or len(d) <= span):
        yield 0, n, np.bincount(d if mask is None else d[mask], minlength=n)
        return
    for lo in range(0, n, span):
        hi = min(n, lo + span)
        parts = []
        for a, b in _blocks(len(d)):
            db = d[a:b]
            m = db >= lo
            m &= db < hi
            if mask is not None:
                m &= mask[a:b]
            parts.append(db[m])
        sel = np.concatenate(parts) if parts else np.zeros(0, d.dtype)
        del parts
        sel -= lo
        c = np.bincount(sel, minlength=hi - lo)
        del sel
        yield lo, hi, c


def _at_compare(table: np.ndarray, idx: np.ndarray, op, value) -> np.ndarray:
    """``op(table[idx], value)`` (a numpy comparison ufunc) as a bool array, looked up :data:`_BLOCK` rows
    at a time: no whole-length temporary of ``table``'s values."""
    out = np.empty(len(idx), bool)
    for a, b in _blocks(len(idx)):
        op(table[idx[a:b]], value, out=out[a:b])
    return out


def _small_codes(s: pd.Series) -> tuple[np.ndarray, list]:
    """(codes, uniques) of ``s`` with the smallest int codes: a categorical's own codes, else
    ``pd.factorize``'s (-1 = NA)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return s.cat.codes.to_numpy(), list(s.cat.categories)
    codes, uniq = pd.factorize(s)
    return np.asarray(codes).astype(np.int32 if len(uniq) < (1 << 31) else np.int64), list(uniq)


def _nth_true(mask: np.ndarray, js: np.ndarray) -> np.ndarray:
    """The indices of ``mask``'s ``js``-th true values (``js`` ascending, a few), a block at a time."""
    out, seen, i, js = [], 0, 0, np.asarray(js).tolist()
    for a, b in _blocks(len(mask)):
        if i == len(js):
            break
        hit = np.flatnonzero(mask[a:b])
        while i < len(js) and js[i] < seen + len(hit):
            out.append(a + int(hit[js[i] - seen]))
            i += 1
        seen += len(hit)
    return np.asarray(out, np.int64)


def _int64(s: pd.Series) -> np.ndarray:
    """``s.astype("int64")`` as a numpy array (no NA left in ``s``)."""
    if s.dtype == np.int64:
        return s.to_numpy()
    if not len(s):
        return np.zeros(0, np.int64)
    return s.astype("int64").to_numpy()


def _is_exact_int(s: pd.Series) -> bool:
    """An integer column (not bool) without NA."""
    if not pd.api.types.is_integer_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
        return False
    return isinstance(s.dtype, np.dtype) or not s.isna().any()


def _exact_int(s: pd.Series) -> np.ndarray | None:
    """``s`` as int64 when it is an integer column without NA, else None (no conversion guessing)."""
    return s.to_numpy(dtype=np.int64) if _is_exact_int(s) else None


def _offset_span(pc: np.ndarray, off: np.ndarray, npart: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per partition code ``0..npart-1``: smallest and largest offset, and whether it has any row."""
    omin = np.full(npart, _I64_MAX)
    omax = np.full(npart, _I64_MIN)
    np.minimum.at(omin, pc, off)
    np.maximum.at(omax, pc, off)
    return omin, omax, omax >= omin


def _int_rows(s: pd.Series, rows) -> np.ndarray:
    """``s[rows]`` (a slice or row indices) of an integer column as int64, converting only those rows."""
    if isinstance(s.dtype, np.dtype):
        return s.to_numpy()[rows].astype(np.int64, copy=False)
    return s.iloc[rows].to_numpy(dtype=np.int64)


class _Places:
    """Positions in (partition, offset) order of one frame's rows, computed when asked for.

    A position is an int64 ``(place << b) | row`` (``b`` = bits of ``len - 1``): unique, and ordered as
    the stable (partition, offset) sort; ``place`` is the offset counted from its partition's first
    offset plus the sizes (offset spans) of the partitions before it. With integer columns and at most
    2**20 partitions only two tables per partition are kept (``start``, and the offset range), so any
    rows' positions cost two look-ups and no per-row array is held; otherwise (NA, non-integer
    columns, spans too wide to pack) pandas' stable sort computes them once and they are kept.

    ``bits``: an upper bound on a position's bit length. :meth:`row_table` / :meth:`lookup` find the row
    holding a (partition, offset) through a dense place → row table when the offsets are dense."""

    def __init__(self, part: pd.Series, off: pd.Series):
        n = len(part)
        self.n, self.part, self.off = n, part, off
        self.b = max(1, (n - 1).bit_length())
        self.start = self.full = self._unique = None
        self.bits = self.b
        if n and _is_exact_int(part) and _is_exact_int(off):
            pmin = min(int(_int_rows(part, slice(a, b)).min()) for a, b in _blocks(n))
            pmax = max(int(_int_rows(part, slice(a, b)).max()) for a, b in _blocks(n))
            if pmax - pmin < (1 << 20):
                npart = pmax - pmin + 1
                omin = np.full(npart, _I64_MAX)
                omax = np.full(npart, _I64_MIN)
                for a, b in _blocks(n):
                    lo, hi, _ = _offset_span(_int_rows(part, slice(a, b)) - pmin, _int_rows(off, slice(a, b)), npart)
                    np.minimum(omin, lo, out=omin)
                    np.maximum(omax, hi, out=omax)
                used = omax >= omin
                width = [int(hi) - int(lo) + 1 if u else 0 for lo, hi, u in zip(omin, omax, used)]
                total = sum(width)
                if total < (1 << (62 - self.b)):  # place fits beside the row bits
                    start = np.zeros(npart, np.int64)
                    start[1:] = np.cumsum(width[:-1], dtype=np.int64)
                    start -= np.where(used, omin, 0)  # place = start[p - pmin] + o
                    self.start, self.pmin, self.npart, self.omin, self.omax = start, pmin, npart, omin, omax
                    self.total = total
                    self.bits = max(1, (total - 1).bit_length()) + self.b
        if self.start is None and n:
            order = pd.DataFrame({"p": part.reset_index(drop=True), "o": off.reset_index(drop=True)}).sort_values(
                ["p", "o"], kind="stable").index.to_numpy()
            full = np.empty(n, np.int64)
            full[order] = np.arange(n, dtype=np.int64)
            full <<= self.b
            full |= np.arange(n, dtype=np.int64)
            self.full = full
            self.bits = max(1, (n - 1).bit_length()) + self.b

    def at(self, rows) -> np.ndarray:
        """Positions (int64) of ``rows``: a slice or an array of row indices."""
        if self.full is not None:
            return self.full[rows]
        pos = self.place_at(rows)
        pos <<= self.b
        pos |= np.arange(rows.start, rows.stop, dtype=np.int64) if isinstance(rows, slice) else rows
        return pos

    def place_at(self, rows) -> np.ndarray:
        """Places (int64, no row bits) of ``rows`` (a slice or row indices); needs the tables."""
        place = self.start[_int_rows(self.part, rows) - self.pmin]
        place += _int_rows(self.off, rows)
        return place

    def unique_small(self) -> bool:
        """Whether places alone order the rows: computed from tables, below 2**31, no two rows at one
        (partition, offset) (a bitmap of the places, one byte each). Cached."""
        if self._unique is None:
            self._unique = False
            if self.start is not None and self.total < (1 << 31):
                seen = np.zeros(self.total, bool)
                count = 0
                for a, b in _blocks(self.n):
                    at = self.place_at(slice(a, b))
                    if seen[at].any():
                        break
                    seen[at] = True
                    now = int(np.count_nonzero(seen))
                    if now - count != b - a:  # a place twice within the block
                        break
                    count = now
                else:
                    self._unique = True
        return self._unique

    def row_table(self) -> np.ndarray | None:
        """place → row (int32; -1: none; the last row of a repeated place), or None when the offsets are
        not dense (their spans exceed 4 per row) or positions are not computed from tables."""
        if self.start is None or self.total > 4 * self.n + 1024:
            return None
        table = np.full(self.total, -1, np.int32 if self.n < (1 << 31) else np.int64)
        for a, b in _blocks(self.n):
            at = self.start[_int_rows(self.part, slice(a, b)) - self.pmin]
            at += _int_rows(self.off, slice(a, b))
            table[at] = np.arange(a, b, dtype=table.dtype)
        return table

    def lookup(self, table: np.ndarray, qp: np.ndarray, qo: np.ndarray) -> np.ndarray:
        """The row of :meth:`row_table` ``table`` holding each (``qp``, ``qo``); -1 when none."""
        qc = qp - self.pmin
        inr = (qc >= 0) & (qc < self.npart)
        every_p = bool(inr.all())
        if not every_p:
            qc[~inr] = 0
        hit = np.greater_equal(qo, self.omin[qc])
        hit &= np.less_equal(qo, self.omax[qc])
        if not every_p:
            hit &= inr
        at = self.start[qc]
        at += qo
        every = bool(hit.all())
        if not every:
            at[~hit] = 0
        out = table[at]
        if not every:
            out[~hit] = -1
        return out


def _earliest_at(rows: np.ndarray, places: _Places, k: int = MAX_EXAMPLES) -> np.ndarray:
    """Indices into ``rows`` of the ``k`` rows first in (partition, offset) order, in that order."""
    if not len(rows):
        return np.zeros(0, np.int64)
    pos = places.at(rows)
    idx = np.argpartition(pos, k - 1)[:k] if len(rows) > k else np.arange(len(rows))
    return idx[np.argsort(pos[idx], kind="stable")]


def _earliest(rows: np.ndarray, places: _Places, k: int = MAX_EXAMPLES) -> np.ndarray:
    """The ``k`` rows (of ``rows``) first in (partition, offset) order, in that order."""
    return rows[_earliest_at(rows, places, k)]


def _run_all(jobs: dict, threaded: bool) -> dict:
    """``{name: job()}``; in threads when ``threaded``: pandas hashes without the GIL, so on a
    multi-core machine the factorisations overlap (~1.8x on 2 cores at 10M rows each). The results
    do not depend on the threads."""
    if not threaded:
        return {k: f() for k, f in jobs.items()}
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as ex:
        futs = {k: ex.submit(f) for k, f in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


def _unify_codes(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-column ``(codes, strs)`` (from ``factorize_str``; ``strs`` may repeat a str) → codes in one
    code space (the smallest int type that holds them), and the str of each code."""
    allstr = np.concatenate([u for _, u in parts]) if parts else np.zeros(0, object)
    g, keys = pd.factorize(allstr)
    code_t = np.int16 if len(keys) < (1 << 15) else np.int32 if len(keys) < (1 << 31) else np.int64
    out, at = [], 0
    for codes, u in parts:
        m = np.asarray(g[at:at + len(u)], dtype=code_t)
        at += len(u)
        out.append(m[codes] if len(codes) else np.zeros(0, code_t))
    return out, np.asarray(keys, dtype=object)


def factorize_str(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, str of each code) such that ``strs[codes] == s.astype(str)`` element-wise: keys as the
    checker compares them (``1``, ``1.0`` and ``True`` stay apart; ``strs`` may name one str twice, which
    ``_unify_codes`` merges), without a str per row: a categorical's codes are used as they are
    (int8/16/32, NA as one more code). ``strs`` is an object array of str."""
    if len(s) == 0:
        return np.zeros(0, np.int64), np.zeros(0, object)
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy()
        strs = np.asarray(pd.Series(s.cat.categories).astype(str), dtype=object)
        if (codes < 0).any():  # NA: its str() the way astype(str) prints it
            na_str = s.iloc[[int(np.flatnonzero(codes < 0)[0])]].astype(str).iloc[0]
            strs = np.append(strs, np.array([na_str], dtype=object))
            codes = np.where(codes < 0, len(strs) - 1, codes).astype(np.int32 if len(strs) < (1 << 31) else np.int64)
        return codes, strs
    vals = s
    if isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "python":
        vals = getattr(s.array, "_ndarray", s)  # the object array behind it (factorize is 2x faster)
    elif s.dtype == object:
        vals = s.to_numpy()
    codes, uniq = pd.factorize(vals)
    codes = np.asarray(codes, dtype=np.int64)
    if s.dtype == object or vals is not s:
        # hashing would merge 1, 1.0 and True; str() does not: only use the codes when all are str
        if not all(type(u) is str for u in uniq):
            return _factorize_plain_str(s)
        strs = np.asarray(uniq, dtype=object)
    else:
        strs = pd.Series(uniq, dtype=s.dtype).astype(str).to_numpy(dtype=object)
        if len(set(strs.tolist())) != len(strs):  # e.g. floats printing alike: stay exact
            return _factorize_plain_str(s)
    if (codes < 0).any():  # NA: its str() the way astype(str) prints it
        if s.dtype == object:  # None and NaN print differently
            return _factorize_plain_str(s)
        na_at = int(np.flatnonzero(codes < 0)[0])
        na_str = s.iloc[[na_at]].astype(str).iloc[0]
        strs = np.append(strs, np.array([na_str], dtype=object))
        codes = np.where(codes < 0, len(strs) - 1, codes)
    return codes, strs


def _factorize_plain_str(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    codes, uniq = pd.factorize(s.astype(str).to_numpy(dtype=object))
    return np.asarray(codes, dtype=np.int64), np.asarray(uniq, dtype=object)


def _seq_blocks(k: np.ndarray, seq: pd.Series, mask: np.ndarray | None, select: bool):
    """``(lo, hi, seqs, valid)`` per block, aligned with ``k[lo:hi]``. Without ``select``, ``k`` has a
    code per row of ``seq`` and ``mask`` (when given) marks the rows that have a seq (``seqs`` is 0
    elsewhere, ``valid`` = that part of ``mask``); with ``select``, ``k`` has codes only for the rows
    ``mask`` selects, and ``seqs`` are theirs (``valid`` None). ``seqs``: ``astype("int64")`` of the
    values, as ``_int64`` converts them."""
    at = 0
    for a, b in _blocks(len(seq)):
        x = seq.iloc[a:b]
        if mask is None:
            yield a, b, _int64(x), None
        elif select:
            m = mask[a:b]
            v = _int64(x if m.all() else x[m])
            yield at, at + len(v), v, None
            at += len(v)
        else:
            m = mask[a:b]
            if m.all():
                yield a, b, _int64(x), m
            else:
                v = np.zeros(b - a, np.int64)
                v[m] = _int64(x[m])
                yield a, b, v, m


def _pair_ids(nk: int, inp, out, hist) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Dense ids of (key code, seq) pairs for input, output and history rows (equal pair = equal id).

    Each of ``inp``, ``out``, ``hist`` is ``(key codes, seq Series, mask)``: the input's codes are per
    row and its mask None; the output's per row, its mask the rows with a seq (the others get id 0);
    the history's only for the rows its mask selects (see ``_seq_blocks``). A pair inside its key's
    input seq range gets ``cum[key] + seq - lo[key]`` (no hashing; ``cum`` = the summed seq ranges of
    the keys before it); the others (unexpected seqs, unknown keys; or all pairs when the input's seqs
    are too sparse for a table) get ids after those by hashing. Seqs are converted a block at a time.
    """
    k_in, s_in, _ = inp
    k_out, s_out, ok = out
    k_h, s_h, h_mask = hist
    lo = np.full(nk, _I64_MAX)
    hi = np.full(nk, _I64_MIN)
    for a, b, s, _v in _seq_blocks(k_in, s_in, None, False):
        np.minimum.at(lo, k_in[a:b], s)
        np.maximum.at(hi, k_in[a:b], s)
    present = hi >= lo
    widths = [int(h) - int(lo_) + 1 if p else 0 for lo_, h, p in zip(lo.tolist(), hi.tolist(), present.tolist())]
    n_dense = sum(widths)
    if n_dense > 2 * len(k_in) + 1024:  # sparse seqs: hash everything
        n_dense = 0
        widths = [0] * nk
    cum = np.zeros(nk, np.int64)
    if nk:
        cum[1:] = np.cumsum(widths[:-1], dtype=np.int64)
    width = np.asarray(widths, dtype=np.uint64) if n_dense else np.zeros(nk, np.uint64)
    lo[~present | (n_dense == 0)] = 0
    n_rows = len(k_in) + len(k_out) + len(k_h)
    id_type = np.int32 if n_dense + n_rows < (1 << 31) else np.int64

    def dense(k, seq, mask, select):
        """id = cum[k] + (seq - lo[k]) when 0 <= seq - lo[k] < width[k] (as unsigned: one compare);
        also the rows that need hashing, with their key codes and seqs."""
        d = np.empty(len(k), id_type)
        rest = ([], [], [])
        for a, b, s, valid in _seq_blocks(k, seq, mask, select):
            kb = k[a:b]
            rel = s - lo[kb]  # a new array: ``s`` may be a view of the frame's column
            inr = rel.view(np.uint64) < width[kb]
            if valid is not None:
                inr &= valid
            rel += cum[kb]
            d[a:b] = rel
            del rel
            if not inr.all():
                d[a:b][~inr] = 0
                r = np.flatnonzero(~inr if valid is None else ~inr & valid)
                rest[0].append(r + a)
                rest[1].append(kb[r])
                rest[2].append(s[r])
        return d, [np.concatenate(x) if x else np.zeros(0, np.int64) for x in rest]

    d_in, r_in = dense(k_in, s_in, None, False)
    d_out, r_out = dense(k_out, s_out, ok, False)
    d_h, r_h = dense(k_h, s_h, h_mask, h_mask is not None)
    n_ids = n_dense
    if any(len(r[0]) for r in (r_in, r_out, r_h)):
        kk = np.concatenate([r_in[1], r_out[1], r_h[1]])
        ss = np.concatenate([r_in[2], r_out[2], r_h[2]])
        ids, n_extra = _hash_pairs(kk, ss)
        ids += n_dense
        a, b = len(r_in[0]), len(r_in[0]) + len(r_out[0])
        d_in[r_in[0]], d_out[r_out[0]], d_h[r_h[0]] = ids[:a], ids[a:b], ids[b:]
        n_ids += n_extra
    return d_in, d_out, d_h, max(n_ids, 1)  # >= 1: rows without a seq look up id 0 (and are masked)


def _hash_pairs(k: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, int]:
    sc, su = pd.factorize(s)
    comp = np.asarray(k, np.int64) * max(1, len(su)) + np.asarray(sc, np.int64)
    ids, u = pd.factorize(comp)
    return np.asarray(ids, np.int64), len(u)


def _with_key_seq(df: pd.DataFrame, rows: np.ndarray, keys: np.ndarray) -> pd.DataFrame:
    """Rows of ``df`` with ``key`` as str (``keys``, one per row) and ``seq`` as int64, as the examples
    show them."""
    return df.iloc[rows].assign(key=keys, seq=_int64(df["seq"].iloc[rows]))


def _per_key(codes: np.ndarray, keys: np.ndarray) -> pd.Series:
    """What ``frame.groupby("key").size()`` gives for a frame whose keys are ``keys[codes]``."""
    c = np.bincount(codes, minlength=len(keys))
    nz = np.flatnonzero(c)
    return pd.Series(c[nz], index=pd.Index(keys[nz], dtype=object, name="key")).sort_index()


def _bad_keys(per_key: dict[str, pd.Series]) -> dict[str, dict[str, int]]:
    """Per bad key, the count of each anomaly (the 50 worst keys by total)."""
    parts = [per_key[name].rename(name) for name in ANOMALY_ORDER if name in per_key]
    if not parts:
        return {}
    t = pd.concat(parts, axis=1).fillna(0).astype(int)
    t = t.loc[t.sum(axis=1).sort_values(ascending=False).index[:50]]
    return {str(k): {c: int(v) for c, v in row.items() if v} for k, row in t.iterrows()}


ANOMALY_ORDER = ("duplicate", "lost", "lost-deleted", "unexpected", "aborted-input-read", "nonmonotonic", "lost-write",
                 "input-duplicate", "failed-write-visible")
