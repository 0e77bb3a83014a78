"""`convwgrad sweep` results as CSV, and `convwgrad score`: the policy against the oracle.

A results file has one row per (shape, config): verified configs carry a time,
failed ones never set a best or a ratio. Per shape:

- baseline: the best Gm = 1 config (the split-K family);
- oracle: the best verified config of any Triton family or torch;
- policy: the config ``plan()`` chose when the sweep ran (the row marked planned);
- torch: torch's own convolution backward (the aten row), measured in the same process.
"""

from __future__ import annotations

import csv
import json
import math
import statistics

import attrs

COLUMNS = ("shape", "problem", "kernel_name", "family", "gm", "spk", "tile", "error", "passed", "time_ms", "planned",
           "note", "target", "device", "problem_json", "spec_json")


#: Columns every results file has had; a file without them is not one (a shapes CSV, say).
REQUIRED_COLUMNS = ("shape", "kernel_name", "family", "passed", "time_ms", "planned")


def _results_reader(f, path: str) -> csv.DictReader:
    """Rows of a results file; a ValueError naming the file when it is not one."""
    reader = csv.DictReader(f)
    header = reader.fieldnames or []
    missing = [column for column in REQUIRED_COLUMNS if column not in header]
    if missing:
        has = f"its columns: {', '.join(header)}" if header else "it is empty"
        raise ValueError(f"{path} is not a results file of `convwgrad sweep`: no column {', '.join(missing)} ({has})")
    return reader


def measured_shapes(path: str) -> set[str]:
    """Shapes a (possibly cut-off) results file already holds, for --resume."""
    try:
        with open(path, newline="") as f:
            if not f.read(1):
                return set()  # created, cut off before its header
            f.seek(0)
            return {row["shape"] for row in _results_reader(f, path)}
    except FileNotFoundError:
        return set()


def write_results(results, path: str, *, append: bool = False) -> int:
    """Write bench ProblemResults as CSV rows (after the existing ones when ``append``); return the count."""
    rows = 0
    fresh = not append or not measured_shapes(path)
    with open(path, "w" if fresh else "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if fresh:
            writer.writeheader()
        for result in results:
            target = result.target
            for config in result.results:
                row = config.row()
                writer.writerow({
                    "shape": result.label, "problem": result.problem.describe(),
                    **{k: row[k] for k in COLUMNS if k in row},
                    "target": target.name if target else "", "device": target.device_name if target else "",
                    "problem_json": json.dumps(attrs.asdict(result.problem)),
                    "spec_json": json.dumps(attrs.asdict(config.spec)),
                })
                rows += 1
    return rows


def _timed(row: dict) -> bool:
    """Verified and timed: the only rows that may set a best or enter a ratio."""
    return row["passed"] == "True" and row["time_ms"] not in ("", "None")


def _timed_with_spec(row: dict) -> bool:
    return _timed(row) and bool(row.get("spec_json"))


def _time(row: dict) -> float:
    return float(row["time_ms"])


def _rows_by_shape(paths, keep=lambda row: True) -> dict[str, list[dict]]:
    """Each shape's rows that ``keep`` passes, from results files where a shape in a later file replaces
    that shape's rows from earlier ones (a ``sweep --confirm-from`` file over its sweep)."""
    by_shape: dict[str, list[dict]] = {}
    for path in paths:
        of_file: dict[str, list[dict]] = {}
        with open(path, newline="") as f:
            for row in _results_reader(f, path):
                of_file.setdefault(row["shape"], []).append(row)
        by_shape.update(of_file)
    return {shape: kept for shape, rows in by_shape.items() if (kept := [r for r in rows if keep(r)])}


def reference_specs(*paths: str) -> dict[str, list[dict]]:
    """Per shape, the spec dicts of the configs a policy is judged against: the oracle (fastest
    verified), the best Gm = 1 config and torch's. ``sweep --confirm-from`` re-times these side by
    side with a revised policy's choice, so a new policy is scored by measurement, not estimate.
    Several files: a shape in a later one replaces it in earlier ones."""
    chosen = {}
    for shape, rows in _rows_by_shape(paths, keep=_timed_with_spec).items():
        picks = [min(rows, key=_time)]
        for family in ("wgrad_splitk", "aten"):
            of_family = [r for r in rows if r["family"] == family]
            if of_family:
                picks.append(min(of_family, key=_time))
        chosen[shape] = [json.loads(r["spec_json"]) for r in picks]
    return chosen


@attrs.frozen
class ShapeScore:
    shape: str
    baseline_ms: float | None
    oracle_ms: float
    policy_ms: float | None
    torch_ms: float | None
    oracle_config: str
    policy_config: str


def planned_specs(*paths: str) -> dict[str, dict]:
    """Per shape, the spec dict of the config the policy chose when the results were taken (several
    files: a shape in a later one replaces it in earlier ones)."""
    planned = _rows_by_shape(paths, keep=lambda row: row["planned"] == "True" and row.get("spec_json"))
    return {shape: json.loads(rows[0]["spec_json"]) for shape, rows in planned.items()}


def read_results(*paths: str) -> list[ShapeScore]:
    """Scores per shape; a shape in a later file replaces that shape's rows from earlier ones
    (a ``sweep --confirm-from`` file over the sweep it re-timed)."""
    return [_score_shape(shape, passed) for shape, passed in _rows_by_shape(paths, keep=_timed).items()]


def _score_shape(shape: str, passed: list[dict]) -> ShapeScore:
    baseline = [_time(r) for r in passed if r["family"] == "wgrad_splitk"]
    torch_rows = [_time(r) for r in passed if r["family"] == "aten"]
    policy = [r for r in passed if r["planned"] == "True"]
    oracle = min(passed, key=_time)
    return ShapeScore(
        shape=shape,
        baseline_ms=min(baseline) if baseline else None,
        oracle_ms=_time(oracle),
        policy_ms=_time(policy[0]) if policy else None,
        torch_ms=min(torch_rows) if torch_rows else None,
        oracle_config=oracle["kernel_name"],
        policy_config=policy[0]["kernel_name"] if policy else "(planned config failed verification)",
    )


def replan(*paths: str, target=None, launch: str = "eager") -> tuple[list[ShapeScore], list[str]]:
    """Score the policy of the code as it is now against a sweep's rows (and its confirm files: a shape in
    a later file replaces it in earlier ones), without a GPU: each
    shape's current plan is looked up among the configs the sweep measured. Returns the
    scores of the shapes whose plan was measured, and the names of those whose plan was not
    (they need a ``sweep --confirm-from`` on the device). ``launch``: the plan for eager calls, or
    for launches from CUDA graphs ("graph"), where only kernel time counts, as in the sweep's timings."""
    from .provider.plan import plan
    from .provider.problem import problem_from_dict
    from .provider.spec import spec_from_dict
    from .provider.target import PROFILES, launched

    scores, unmeasured = [], []
    for shape, passed in _rows_by_shape(paths, keep=_timed_with_spec).items():
        chosen = plan(problem_from_dict(json.loads(passed[0]["problem_json"])),
                      launched(target or PROFILES[passed[0]["target"]], launch))
        policy = [r for r in passed if spec_from_dict(json.loads(r["spec_json"])) == chosen.spec]
        if not policy:
            unmeasured.append(shape)
            continue
        rows_as_planned = [{**r, "planned": str(r is policy[0])} for r in passed]
        scores.append(_score_shape(shape, rows_as_planned))
    return scores, unmeasured


def _stats(values) -> dict:
    values = sorted(v for v in values if v is not None)
    if not values:
        return {"n": 0}
    p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
    return {
        "n": len(values),
        "geomean": math.exp(sum(map(math.log, values)) / len(values)),
        "median": statistics.median(values),
        "p90": p90,
        "min": values[0],
        "max": values[-1],
    }


def score(scores: list[ShapeScore]) -> dict:
    """Aggregate speedups (time ratios > 1 mean faster than the reference)."""
    over_baseline = [s.baseline_ms / s.policy_ms for s in scores if s.baseline_ms and s.policy_ms]
    oracle_over_baseline = [s.baseline_ms / s.oracle_ms for s in scores if s.baseline_ms]
    captured = [s.oracle_ms / s.policy_ms for s in scores if s.policy_ms]
    over_torch = [s.torch_ms / s.policy_ms for s in scores if s.torch_ms and s.policy_ms]
    exact = sum(1 for s in scores if s.policy_config == s.oracle_config)
    worst = min(scores, key=lambda s: s.oracle_ms / s.policy_ms if s.policy_ms else 0.0, default=None)
    return {
        "shapes": len(scores),
        "policy_speedup_over_gm1": _stats(over_baseline),
        "oracle_speedup_over_gm1": _stats(oracle_over_baseline),
        "policy_fraction_of_oracle": _stats(captured),
        "policy_speedup_over_torch": _stats(over_torch),
        "exact_best": exact,
        "worst_vs_oracle": None if worst is None else {
            "shape": worst.shape, "fraction": worst.oracle_ms / worst.policy_ms if worst.policy_ms else 0.0,
            "policy": worst.policy_config, "oracle": worst.oracle_config,
        },
    }


def format_score(summary: dict) -> str:
    lines = [f"shapes scored: {summary['shapes']}; policy picked the exact best on {summary['exact_best']}"]
    for key, label in (
        ("policy_speedup_over_gm1", "policy speedup over best Gm=1"),
        ("oracle_speedup_over_gm1", "oracle speedup over best Gm=1"),
        ("policy_fraction_of_oracle", "fraction of the oracle captured"),
        ("policy_speedup_over_torch", "policy speedup over torch (cuDNN)"),
    ):
        st = summary[key]
        if not st["n"]:
            lines.append(f"{label}: no data")
            continue
        lines.append(f"{label}: geomean {st['geomean']:.3f} median {st['median']:.3f} p90 {st['p90']:.3f} "
                     f"min {st['min']:.3f} max {st['max']:.3f} (n={st['n']})")
    worst = summary["worst_vs_oracle"]
    if worst:
        lines.append(f"worst vs oracle: {worst['shape']} at {worst['fraction']:.3f} "
                     f"(policy {worst['policy']}, oracle {worst['oracle']})")
    return "\n".join(lines)


def plot(scores: list[ShapeScore], path: str) -> str:
    """PNG of per-shape speedups (policy over Gm=1, oracle over Gm=1, policy over torch), sorted."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'convwgrad[plot]'): no plot written"
    series = {
        "policy / best Gm=1": [s.baseline_ms / s.policy_ms for s in scores if s.baseline_ms and s.policy_ms],
        "oracle / best Gm=1": [s.baseline_ms / s.oracle_ms for s in scores if s.baseline_ms],
        "policy / torch": [s.torch_ms / s.policy_ms for s in scores if s.torch_ms and s.policy_ms],
    }
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, values in series.items():
        ax.plot(sorted(values), marker=".", linewidth=1, label=label)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("shapes, sorted by speedup")
    ax.set_ylabel("speedup (x, log scale)")
    ax.set_title("convwgrad: per-shape speedups")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"
