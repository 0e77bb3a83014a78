"""An optional persistent tuning cache: the best verified config of each swept shape.

Written by ``convwgrad sweep ... --tuning-cache FILE`` on a device; read when
``CONVWGRAD_TUNING_CACHE=FILE`` is set. Entries are keyed by problem, target
and device; the file by library version. A corrupt or malformed file, a file of
another library version, or an entry that no longer parses is ignored with one
warning per version of the file (at the user's call), never trusted: the policy
plans instead. plan() also re-judges every tuned spec with support().
"""

from __future__ import annotations

import json
import os

import attrs

from convwgrad.provider.diagnostics import warn_at_caller
from convwgrad.provider.plan import clear_plan_cache
from convwgrad.provider.problem import ConvProblem, problem_from_dict
from convwgrad.provider.spec import KernelSpec, spec_from_dict

ENV = "CONVWGRAD_TUNING_CACHE"
FORMAT = 1
#: Bad entries a warning spells out; the rest are counted. A file of hundreds of bad
#: entries (another tool's JSON) would otherwise print a warning pages long.
MAX_REASONS_SHOWN = 3


def _version() -> str:
    from convwgrad import __version__

    return __version__


def _problem_key(problem: ConvProblem) -> str:
    return json.dumps(attrs.asdict(problem, recurse=True), sort_keys=True, default=list)


def cache_from_results(results_path: str, cache_path: str) -> int:
    """Write a tuning cache of each shape's fastest verified config from `convwgrad sweep` results."""
    import csv

    best: dict[tuple, dict] = {}
    with open(results_path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("passed") != "True" or row.get("time_ms") in ("", "None") or not row.get("spec_json"):
                continue
            key = (row["problem_json"], row["target"], row["device"])
            if key not in best or float(row["time_ms"]) < float(best[key]["time_ms"]):
                best[key] = row
    records = [
        {"problem": json.loads(r["problem_json"]), "target": r["target"], "device": r["device"],
         "spec": json.loads(r["spec_json"]), "time_ms": float(r["time_ms"])}
        for r in best.values()
    ]
    return _write(cache_path, records)


def _write(path: str, records: list) -> int:
    with open(path, "w") as f:
        json.dump({"format": FORMAT, "library_version": _version(), "entries": records}, f, indent=1)
    return len(records)


def write_cache(path: str, entries) -> int:
    """Write ``(problem, target, spec, time_ms)`` entries; return how many."""
    records = [
        {
            "problem": attrs.asdict(problem, recurse=True),
            "target": target.name,
            "device": target.device_name,
            "spec": attrs.asdict(spec, recurse=True),
            "time_ms": time_ms,
        }
        for problem, target, spec, time_ms in entries
    ]
    return _write(path, records)


class MalformedCacheError(ValueError):
    """The tuning-cache file is not what ``convwgrad sweep`` writes (its message says how)."""


def _records(data) -> list:
    """The entries of a loaded cache file; MalformedCacheError naming what is wrong otherwise."""
    if not isinstance(data, dict):
        raise MalformedCacheError(
            f"the top level is a JSON {type(data).__name__}, expected an object with 'format', "
            "'library_version' and 'entries'"
        )
    if data.get("format") != FORMAT or data.get("library_version") != _version():
        raise MalformedCacheError(f"stale: format {data.get('format')!r}, library {data.get('library_version')!r} "
                                  f"(this is format {FORMAT}, library {_version()})")
    records = data.get("entries")
    if not isinstance(records, list):
        raise MalformedCacheError(f"'entries' is {records!r}, expected a list of entries")
    return records


def _entry(record) -> tuple[tuple, KernelSpec]:
    """(lookup key, spec) of one cache entry; raises naming what is wrong with it."""
    if not isinstance(record, dict):
        raise MalformedCacheError(f"an entry is {record!r}, expected an object")
    fields = record.get("problem")
    if not isinstance(fields, dict):
        raise MalformedCacheError(f"'problem' is {fields!r}, expected an object")
    problem = problem_from_dict(fields)
    spec = record.get("spec")
    if not isinstance(spec, dict):
        raise MalformedCacheError(f"'spec' is {spec!r}, expected an object")
    target = record.get("target")
    if not isinstance(target, str):
        raise MalformedCacheError(f"'target' is {target!r}, expected a profile name")
    return (_problem_key(problem), target, record.get("device", "")), spec_from_dict(spec)


class TuningCache:
    def __init__(self):
        self._source = None  # (path, mtime) of what is loaded
        self._entries: dict = {}

    def _load(self, path: str) -> None:
        """Load ``path`` if it changed; each problem with it is one warning, given once per
        version of the file, and the policy plans whatever the file cannot answer."""
        try:
            mtime = os.path.getmtime(path)
        except OSError as exc:
            if self._source != (path, None):
                warn_at_caller(f"{ENV}={path}: cannot read it ({exc}); ignoring the tuning cache")
            self._source, self._entries = (path, None), {}
            return
        if self._source == (path, mtime):
            return
        self._source, self._entries = (path, mtime), {}
        clear_plan_cache()
        try:
            with open(path) as f:
                records = _records(json.load(f))
        except Exception as exc:  # an untrusted file: whatever reading it raises, the policy plans
            warn_at_caller(f"{ENV}={path}: ignored ({type(exc).__name__}: {exc})")
            return
        bad = []
        for index, record in enumerate(records):
            try:
                key, spec = _entry(record)
            except Exception as exc:  # as above: one bad entry never stops plan()
                bad.append(f"entry {index}: {type(exc).__name__}: {exc}")
                continue
            self._entries[key] = spec
        if bad:
            shown = "; ".join(bad[:MAX_REASONS_SHOWN]) + ("; ..." if len(bad) > MAX_REASONS_SHOWN else "")
            warn_at_caller(f"{ENV}={path}: {len(bad)} of {len(records)} entries ignored ({shown})")

    def lookup(self, problem: ConvProblem, target) -> KernelSpec | None:
        path = os.environ.get(ENV)
        if not path:
            return None
        self._load(path)
        key = (_problem_key(problem), target.name)
        return self._entries.get((*key, target.device_name)) or self._entries.get((*key, ""))


CACHE = TuningCache()
