"""Read a Spark file sink's ``_spark_metadata`` log without Spark.

This is a research sketch for onceproof. See spark-file-sink.md in this folder for where each
rule comes from in the Spark source. Standard library only.

    committed = read_committed(out_dir)             # what Spark's readers treat as the output
    report = audit(out_dir, committed)               # files that are orphaned, missing, or the wrong size
"""
from __future__ import annotations

import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field

METADATA_DIR = "_spark_metadata"          # FileStreamSink.metadataDir
COMPACT_SUFFIX = ".compact"               # CompactibleFileStreamLog.COMPACT_FILE_SUFFIX
MAX_VERSION = 1                           # FileStreamSinkLog.VERSION
# A batch file is named "<id>" or "<id>.compact". Spark parses the id with String.toLong, which
# would also accept a leading '+' or '-'. Spark never writes either, so only digits are accepted
# here. Names such as ".3.<uuid>.tmp", ".3.crc" and "foo" are ignored, as Spark ignores them.
_BATCH_RE = re.compile(r"^(\d+)(\.compact)?$")
_VERSION_RE = re.compile(r"^v(\d+)$")


class SinkLogError(Exception):
    """The log is one that Spark itself would refuse to read."""


@dataclass
class Entry:
    batch: int            # id of the log file that holds the entry (for a .compact file, its id)
    path: str             # exactly as stored: a URI string, e.g. "file:/out/part-00000-<uuid>-c000.json"
    size: int
    is_dir: bool
    mtime: int
    action: str


@dataclass
class Committed:
    latest_batch: int | None                  # HDFSMetadataLog.getLatestBatchId(), or None
    files: dict[str, Entry]                   # local path -> entry (the last entry wins, as in Spark)
    read_batches: list[int]                   # ids of the log files that were read
    anomalies: list[str] = field(default_factory=list)


def list_batch_files(meta_dir: str) -> dict[int, list[str]]:
    """Map each batch id to the names of its log files. Only regular files count, as in Spark's listBatches."""
    out: dict[int, list[str]] = {}
    for name in os.listdir(meta_dir):
        m = _BATCH_RE.match(name)
        if m and os.path.isfile(os.path.join(meta_dir, name)):
            out.setdefault(int(m.group(1)), []).append(name)
    return out


def read_log_file(path: str, max_version: int = MAX_VERSION) -> list[dict]:
    """Read one log file: a "v<N>" header line, then one JSON SinkFileStatus per line.

    Spark writes the entries with no trailing newline, so an empty log is the bare "v1".
    """
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    if text == "":
        raise SinkLogError(f"{path}: Incomplete log file")           # same message as Spark
    lines = text.split("\n")
    if lines and lines[-1] == "":                                    # tolerate one trailing "\n"
        lines.pop()
    m = _VERSION_RE.match(lines[0])
    if not m or int(m.group(1)) <= 0:
        raise SinkLogError(f"{path}: malformed version line {lines[0]!r}")
    if int(m.group(1)) > max_version:
        raise SinkLogError(f"{path}: log version v{m.group(1)} > supported v{max_version}")
    return [json.loads(line) for line in lines[1:]]                  # an empty line fails, as in Spark


def uri_to_local(uri: str, remap: list[tuple[str, str]] = ()) -> str:
    """Turn a stored path (Hadoop Path.toUri.toString) into a local filesystem path.

    "file:/x/a%20b" and "file:///x/a%20b" both become "/x/a b". Percent escapes are decoded exactly
    once: a Hive-escaped partition directory "k=a%3Ab" is stored as "k=a%253Ab". ``remap`` rewrites
    a path prefix, for when Spark ran in a container with the output mounted somewhere else.
    """
    u = urllib.parse.urlsplit(uri)
    if u.scheme not in ("", "file"):
        raise SinkLogError(f"non-local URI {uri!r}: compare URIs instead")
    p = urllib.parse.unquote(u.path)
    for src, dst in remap:
        src = src.rstrip("/")
        if p == src or p.startswith(src + "/"):
            p = dst.rstrip("/") + p[len(src):]
            break
    return os.path.normpath(p)


def read_committed(out_dir: str, *, honor_delete: bool = False,
                   retention_ms: int | None = None, now_ms: int | None = None,
                   remap: list[tuple[str, str]] = ()) -> Committed:
    """Find the committed file set, as CompactibleFileStreamLog.allFiles + MetadataLogFileIndex would.

    honor_delete=False is how Spark 3.1 and later behave: an entry's "action" is never read, so a
    "delete" entry is still a visible file. honor_delete=True is the rule of 2.x to 3.0, where
    "delete" hid the path. Either way, any action other than "add" is reported as an anomaly.
    retention_ms copies FileStreamSinkLog.shouldRetain; MetadataLogFileIndex does not apply it.
    """
    meta = os.path.join(out_dir, METADATA_DIR)
    if not os.path.isdir(meta):
        raise SinkLogError(f"no {METADATA_DIR} under {out_dir}: not a file-sink output")
    batches = list_batch_files(meta)
    anomalies: list[str] = []
    if not batches:
        return Committed(None, {}, [], anomalies)
    latest = max(batches)                                   # getLatestBatchId = max id listed
    compacts = [b for b, names in batches.items() if any(n.endswith(COMPACT_SUFFIX) for n in names)]
    # Start at the newest .compact file: it holds every entry of batches 0..id, less any dropped by
    # retention. With no .compact file, the log must start at batch 0.
    start = max(compacts) if compacts else 0
    order = list(range(start, latest + 1))
    missing = [b for b in order if b not in batches]
    if missing:
        raise SinkLogError(f"log files missing for batches {missing} (latest={latest})")
    files: dict[str, Entry] = {}
    for b in order:
        names = batches[b]
        if len(names) > 1:
            anomalies.append(f"batch {b} has several files {sorted(names)}; using the .compact one")
        name = next((n for n in names if n.endswith(COMPACT_SUFFIX)), names[0])
        if b == start and compacts and not name.endswith(COMPACT_SUFFIX):
            raise SinkLogError(f"expected {b}{COMPACT_SUFFIX}")
        for rec in read_log_file(os.path.join(meta, name)):
            e = Entry(b, rec["path"], int(rec["size"]), bool(rec["isDir"]),
                      int(rec["modificationTime"]), rec.get("action", "add"))
            if retention_ms is not None and now_ms is not None and now_ms - e.mtime > retention_ms:
                continue
            if e.action != "add":
                anomalies.append(f"batch {b}: action {e.action!r} for {e.path}")
            local = uri_to_local(e.path, remap)
            if honor_delete and e.action == "delete":
                files.pop(local, None)
                continue
            if e.is_dir:                                     # MetadataLogFileIndex drops directories
                continue
            if local in files and files[local].batch != b:
                anomalies.append(f"{local} listed in batch {files[local].batch} and again in batch {b}")
            files[local] = e
    return Committed(latest, files, order, anomalies)


def is_hidden(name: str) -> bool:
    """Names Spark skips when it lists a directory (HadoopFSUtils.shouldFilterOutPathName)."""
    exclude = (name.startswith("_") and "=" not in name) or name.startswith(".") \
        or name.endswith("._COPYING_")
    include = name.startswith("_common_metadata") or name.startswith("_metadata")
    return exclude and not include


def audit(out_dir: str, committed: Committed) -> dict[str, list]:
    """Compare the committed set with what is on disk."""
    on_disk: dict[str, int] = {}
    for root, dirs, names in os.walk(out_dir):
        dirs[:] = [d for d in dirs if not is_hidden(d)]      # prunes _spark_metadata and dot-dirs
        for n in names:
            if not is_hidden(n):
                p = os.path.normpath(os.path.join(root, n))
                on_disk[os.path.realpath(p)] = os.stat(p).st_size
    want = {os.path.realpath(p): e for p, e in committed.files.items()}
    return {
        "orphans": sorted(p for p in on_disk if p not in want),          # written, never committed
        "missing": sorted(p for p in want if p not in on_disk),          # committed, now gone
        "size_mismatch": sorted((p, want[p].size, on_disk[p]) for p in want
                                if p in on_disk and on_disk[p] != want[p].size),
    }
