"""sweep writes verified rows; score computes the policy's standing against the oracle."""

import csv
import math

from convwgrad.cli import main
from convwgrad.scoring import COLUMNS, read_results, replan, score


def write(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for shape, name, family, time_ms, planned, passed in rows:
            writer.writerow({"shape": shape, "problem": "-", "kernel_name": name, "family": family, "gm": 1,
                             "spk": 1, "tile": "-", "error": 0.001, "passed": passed, "time_ms": time_ms,
                             "planned": planned, "note": ""})


def test_score_against_oracle_and_baselines(tmp_path):
    path = tmp_path / "results.csv"
    write(path, [
        ("a", "splitk", "wgrad_splitk", 10.0, False, True),
        ("a", "merged8", "wgrad_merged", 2.0, True, True),   # policy = oracle
        ("a", "aten", "aten", 4.0, False, True),
        ("b", "splitk", "wgrad_splitk", 8.0, False, True),
        ("b", "merged4", "wgrad_merged", 4.0, True, True),   # policy
        ("b", "merged8", "wgrad_merged", 1.0, False, False),  # failed verification: never the oracle
        ("b", "merged16", "wgrad_merged", 2.0, False, True),  # oracle
        ("b", "aten", "aten", 8.0, False, True),
    ])
    summary = score(read_results(str(path)))
    assert summary["shapes"] == 2 and summary["exact_best"] == 1
    assert math.isclose(summary["policy_speedup_over_gm1"]["geomean"], math.sqrt(5.0 * 2.0))
    assert math.isclose(summary["policy_fraction_of_oracle"]["min"], 0.5)
    assert summary["worst_vs_oracle"]["shape"] == "b" and summary["worst_vs_oracle"]["oracle"] == "merged16"
    assert math.isclose(summary["policy_speedup_over_torch"]["max"], 2.0)


def test_sweep_then_score_on_the_interpreter(tmp_path, capsys):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k,s\ntiny,1,8,8,5,5,3,1\n")
    results = tmp_path / "results.csv"
    assert main(["sweep", str(shapes), "-o", str(results), "--splits", "1,2", "--first-tile-only",
                 "--no-progress", "--dtype", "fp16"]) == 0
    rows = list(csv.DictReader(open(results)))
    assert {r["family"] for r in rows} == {"wgrad_merged", "wgrad_shifted", "wgrad_splitk", "wgrad_direct", "aten"}  # channels_last: not the NCHW family
    assert sum(r["planned"] == "True" for r in rows) == 1 and all(r["passed"] == "True" for r in rows)
    assert main(["score", str(results)]) == 0
    assert "fraction of the oracle captured" in capsys.readouterr().out


def test_sweep_resumes_and_shards(tmp_path):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k,s\none,1,8,8,5,5,3,1\ntwo,1,4,4,5,5,3,1\nthree,1,2,2,5,5,3,1\n")
    results = tmp_path / "results.csv"
    common = ["--splits", "1", "--first-tile-only", "--no-progress", "--dtype", "fp32"]
    assert main(["sweep", str(shapes), "-o", str(results), "--shard", "0/2", *common]) == 0
    assert {r["shape"] for r in csv.DictReader(open(results))} == {"one", "three"}
    assert main(["sweep", str(shapes), "-o", str(results), "--resume", *common]) == 0
    rows = list(csv.DictReader(open(results)))
    assert {r["shape"] for r in rows} == {"one", "two", "three"}
    assert len(rows) == len({(r["shape"], r["kernel_name"]) for r in rows})  # nothing measured twice


def test_confirm_times_the_plan_beside_the_earlier_oracle_and_baselines(tmp_path):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k,s\none,1,16,16,5,5,3,1\n")
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    common = ["--first-tile-only", "--no-progress", "--dtype", "fp32"]
    assert main(["sweep", str(shapes), "-o", str(first), "--splits", "1,2", *common]) == 0
    swept = list(csv.DictReader(open(first)))
    assert main(["sweep", str(shapes), "-o", str(second), "--confirm-from", str(first), *common]) == 0
    rows = list(csv.DictReader(open(second)))
    names = [r["kernel_name"] for r in rows]
    assert len(names) == len(set(names)) <= 4 < len(swept)
    assert sum(r["planned"] == "True" for r in rows) == 1 and all(r["passed"] == "True" for r in rows)
    oracle = min(swept, key=lambda r: float(r["time_ms"]))["kernel_name"]
    assert oracle in names and {"aten", "wgrad_splitk"} <= {r["family"] for r in rows}
    # the plan is unchanged since the first sweep: --changed-only has nothing to re-time
    unchanged = tmp_path / "unchanged.csv"
    assert main(["sweep", str(shapes), "-o", str(unchanged), "--confirm-from", str(first), "--changed-only",
                 *common]) == 0
    assert not unchanged.exists() or not list(csv.DictReader(open(unchanged)))
    # --replan looks the current plan up among the measured rows: here, the planned row itself
    replanned, unmeasured = replan(str(first))
    assert unmeasured == [] and replanned[0].policy_ms == float(next(r["time_ms"] for r in swept if r["planned"] == "True"))
    assert main(["score", str(first), "--replan"]) == 0
    # scoring several files: the later file's rows replace the shape's earlier ones
    (scored,) = read_results(str(first), str(second))
    assert scored.policy_ms == float(next(r["time_ms"] for r in rows if r["planned"] == "True"))
    # a sweep and its confirm file together: --replan and a repeated --confirm-from read the later file's rows
    (rescored,), unmeasured = replan(str(first), str(second))
    assert unmeasured == [] and rescored.policy_ms == scored.policy_ms
    assert main(["score", str(first), str(second), "--replan"]) == 0
    again = tmp_path / "again.csv"
    assert main(["sweep", str(shapes), "-o", str(again), "--confirm-from", str(first), "--confirm-from", str(second),
                 "--changed-only", *common]) == 0
    assert not again.exists() or not list(csv.DictReader(open(again)))


def test_a_later_file_replaces_a_shape_even_where_none_of_its_rows_passed(tmp_path):
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    write(first, [("a", "m", "wgrad_merged", 2.0, True, True), ("b", "m", "wgrad_merged", 3.0, True, True)])
    write(second, [("a", "m", "wgrad_merged", 1.0, True, False)])
    assert [s.shape for s in read_results(str(first), str(second))] == ["b"]
    assert {s.shape for s in read_results(str(second), str(first))} == {"a", "b"}


def test_plot_is_a_png(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    from convwgrad.scoring import plot

    path = tmp_path / "results.csv"
    write(path, [("a", "splitk", "wgrad_splitk", 10.0, False, True), ("a", "m", "wgrad_merged", 2.0, True, True),
                 ("a", "aten", "aten", 4.0, False, True)])
    png = tmp_path / "speedups.png"
    assert "written" in plot(read_results(str(path)), str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replan_for_graph_launches_takes_the_graph_route(tmp_path):
    """A class the router gives to a family only for launches from CUDA graphs (the staged family's small
    filters): --launch graph scores that plan, the default scores the eager one."""
    import json

    import attrs

    from convwgrad import plan
    from convwgrad.provider import PROFILES, ConvProblem
    from convwgrad.provider.target import launched

    problem = ConvProblem.build(batch=32, groups=144, in_channels=144, out_channels=144, input_size=(56, 56),
                                filter_size=3, padding=1, dtype="bf16", layout="channels_last")
    eager, graph = plan(problem, "sm_90"), plan(problem, launched(PROFILES["sm_90"], "graph"))
    assert (eager.family, graph.family) == ("aten", "wgrad_staged")
    path = tmp_path / "results.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for chosen, time_ms in ((eager, "0.2"), (graph, "0.1")):
            writer.writerow({"shape": "mbv2", "problem": problem.describe(), "kernel_name": chosen.kernel_name,
                             "family": chosen.family, "gm": 1, "spk": chosen.split_k, "tile": "-", "error": "0",
                             "passed": "True", "time_ms": time_ms, "planned": "False", "note": "", "target": "sm_90",
                             "device": "test", "problem_json": json.dumps(attrs.asdict(problem)),
                             "spec_json": json.dumps(attrs.asdict(chosen.spec))})
    (as_eager,), _ = replan(str(path))
    (as_graph,), _ = replan(str(path), launch="graph")
    assert (as_eager.policy_ms, as_graph.policy_ms) == (0.2, 0.1)
    assert main(["score", str(path), "--replan", "--launch", "graph"]) == 0


def test_sweep_launch_graph_marks_the_plan_for_graph_launches(tmp_path, monkeypatch):
    """`sweep --launch graph` (what gpu_confirm.sh's LAUNCH=graph runs) marks the plan made for graph launches
    as planned; on the interpreter both launches plan alike, so the target the plan was asked for is checked."""
    from convwgrad import bench

    asked = []
    real = bench.make_plan

    def recording(problem, target=None, **pins):
        asked.append(target.launch)
        return real(problem, target, **pins)

    monkeypatch.setattr(bench, "make_plan", recording)
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k,s\ntiny,1,8,8,5,5,3,1\n")
    results = tmp_path / "results.csv"
    common = ["--splits", "1", "--first-tile-only", "--no-progress", "--dtype", "fp32", "--verify-only"]
    assert main(["sweep", str(shapes), "-o", str(results), "--launch", "graph", *common]) == 0
    assert asked[0] == "graph"   # the planned row's plan (the eager plan is still swept beside it)
    rows = list(csv.DictReader(open(results)))
    assert sum(r["planned"] == "True" for r in rows) == 1
    asked.clear()
    assert main(["sweep", str(shapes), "-o", str(results), *common]) == 0
    assert asked and set(asked) == {"eager"}
