"""Ratios from `convwgrad bench --json`: best merged config vs best Gm = 1 config vs torch (cuDNN).

    python tools/merged_vs_gm1.py bench.json
Prints one row per layer, then geometric mean, median, min and max of each ratio
(time of best merged / time of best Gm = 1: below 1 means merging is faster).
"""

import json
import math
import statistics
import sys


def best(configs, predicate):
    times = [c["time_ms"] for c in configs if c["passed"] and predicate(c)]
    return min(times) if times else None


def summary(name, values):
    values = [v for v in values if v is not None]
    if not values:
        return f"{name}: no data"
    geo = math.exp(sum(map(math.log, values)) / len(values))
    return (f"{name}: n={len(values)} geomean {geo:.3f} median {statistics.median(values):.3f} "
            f"min {min(values):.3f} max {max(values):.3f}")


def main(path):
    results = json.load(open(path))
    merged_vs_gm1, merged_vs_aten, best_vs_aten = [], [], []
    print(f"{'layer':<34} {'gm1_us':>9} {'merged_us':>10} {'best_gm':>7} {'aten_us':>9} {'m/gm1':>7} {'m/aten':>7}")
    for r in results:
        configs = r["configs"]
        gm1 = best(configs, lambda c: c["family"] == "wgrad_splitk")
        merged = best(configs, lambda c: c["family"] == "wgrad_merged")
        aten = best(configs, lambda c: c["family"] == "aten")
        gm = min((c for c in configs if c["passed"] and c["family"] == "wgrad_merged"),
                 key=lambda c: c["time_ms"], default={"gm": "-"})["gm"]
        ratio = merged / gm1 if merged and gm1 else None
        vs_aten = merged / aten if merged and aten else None
        merged_vs_gm1.append(ratio)
        merged_vs_aten.append(vs_aten)
        fmt = lambda v, scale=1e3: f"{v * scale:.1f}" if v else "-"  # noqa: E731
        print(f"{r['label'][:34]:<34} {fmt(gm1):>9} {fmt(merged):>10} {gm!s:>7} {fmt(aten):>9} "
              f"{fmt(ratio, 1) if ratio else '-':>7} {fmt(vs_aten, 1) if vs_aten else '-':>7}")
        failed = [c["kernel_name"] for c in configs if not c["passed"]]
        if failed:
            print(f"   FAILED verification: {failed}")
    print(summary("best merged / best Gm=1", merged_vs_gm1))
    print(summary("best merged / torch (cuDNN)", merged_vs_aten))


if __name__ == "__main__":
    main(sys.argv[1])
