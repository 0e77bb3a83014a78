"""An optional persistent tuning cache: the best verified config of each swept shape.

Written by ``convwgrad sweep ... --tuning-cache FILE`` on a device; read when
``CONVWGRAD_TUNING_CACHE=FILE`` is set. Entries are keyed by problem, target
and device; the file by library version. A corrupt file, a file of another
library version, or an entry that no longer parses is ignored with a warning,
never trusted; plan() also re-judges every tuned spec with support().
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import attrs
import pluggy

from convwgrad.provider.plan import clear_plan_cache
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import KernelSpec, spec_from_dict

ENV = "CONVWGRAD_TUNING_CACHE"
FORMAT = 1


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


#: Where convwgrad's and pluggy's frames live: a warning about the cache skips them.
_OWN_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # convwgrad/
    os.path.dirname(os.path.abspath(pluggy.__file__)) + os.sep,  # pluggy/
)


def _caller_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, for the function that calls this, of the first frame outside
    convwgrad and pluggy: the warning points at the user's plan(), explain() or layer, whatever
    depth pluggy's hook calling has in its installed version (a fixed count pointed into pluggy)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIRS):
        frame, level = frame.f_back, level + 1
    return level


class TuningCache:
    def __init__(self):
        self._source = None  # (path, mtime) of what is loaded
        self._entries: dict = {}

    def _load(self, path: str) -> None:
        try:
            mtime = os.path.getmtime(path)
        except OSError as exc:
            if self._source != (path, None):
                warnings.warn(f"{ENV}={path}: cannot read it ({exc}); ignoring the tuning cache",
                              stacklevel=_caller_stacklevel())
            self._source, self._entries = (path, None), {}
            return
        if self._source == (path, mtime):
            return
        self._source, self._entries = (path, mtime), {}
        clear_plan_cache()
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("format") != FORMAT or data.get("library_version") != _version():
                raise ValueError(f"stale: format {data.get('format')}, library {data.get('library_version')} "
                                 f"(this is format {FORMAT}, library {_version()})")
            records = data["entries"]
        except Exception as exc:
            warnings.warn(f"{ENV}={path}: ignored ({type(exc).__name__}: {exc})", stacklevel=_caller_stacklevel())
            return
        for record in records:
            try:
                problem = ConvProblem(**{
                    **record["problem"],
                    **{k: tuple(record["problem"][k]) for k in ("input_size", "filter_size", "stride", "dilation")},
                    "padding": tuple(tuple(p) for p in record["problem"]["padding"]),
                })
                spec = spec_from_dict(record["spec"])
                self._entries[(_problem_key(problem), record["target"], record.get("device", ""))] = spec
            except Exception as exc:
                warnings.warn(f"{ENV}={path}: an entry is ignored ({type(exc).__name__}: {exc})",
                              stacklevel=_caller_stacklevel())

    def lookup(self, problem: ConvProblem, target) -> KernelSpec | None:
        path = os.environ.get(ENV)
        if not path:
            return None
        self._load(path)
        key = (_problem_key(problem), target.name)
        return self._entries.get((*key, target.device_name)) or self._entries.get((*key, ""))


CACHE = TuningCache()
