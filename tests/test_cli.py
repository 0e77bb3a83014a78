"""The convwgrad command on tiny shapes (Triton interpreter), and every user error it refuses."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import convwgrad
from convwgrad.cli import main
from convwgrad.shapes import parse_shape, read_csv

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = "N=2,C=4,H=5,W=5,k=3,g=4"
#: the README's bench example: a full-size layer, hours in the interpreter
FULL_SIZE = "N=32,C=144,H=56,W=56,k=3,s=1,g=144"


def test_bench_json_ranks_and_marks_plan(capsys):
    assert main(["bench", "--shape", "N=2,C=4,H=5,W=5,k=3,g=4", "--json", "--no-progress", "--dtype", "fp16"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    configs = result["configs"]
    assert sum(c["planned"] for c in configs) == 1
    # bench's default layout is channels_last, which the NCHW-only aten_channels_last family refuses
    assert {c["family"] for c in configs} == {"wgrad_merged", "wgrad_shifted", "wgrad_splitk", "wgrad_direct", "aten"}
    assert all(c["passed"] and c["time_ms"] > 0 for c in configs)
    assert len({c["kernel_name"] for c in configs}) == len(configs)


def test_bench_family_sweeps_one_family_beside_the_plan(capsys):
    argv = ["bench", "--shape", "N=1,C=2,H=6,W=7,k=5,g=2", "--json", "--no-progress", "--family", "wgrad_shifted"]
    assert main(argv) == 0
    (result,) = json.loads(capsys.readouterr().out)
    configs = result["configs"]
    planned = [c for c in configs if c["planned"]]
    shifted = [c for c in configs if c["family"] == "wgrad_shifted"]
    assert len(planned) == 1 and planned[0]["family"] != "wgrad_shifted"  # opt-in: timed beside the plan
    assert len(shifted) >= 2 and all(c["passed"] for c in shifted)
    assert {c["family"] for c in configs} == {"wgrad_shifted", planned[0]["family"]}


def test_bench_family_sweeps_that_family_beside_the_plan(capsys):
    argv = ["bench", "--shape", TINY, "--json", "--no-progress", "--family", "wgrad_direct", "--splits", "1,2"]
    assert main(argv) == 0
    (result,) = json.loads(capsys.readouterr().out)
    configs = result["configs"]
    planned = [c for c in configs if c["planned"]]
    assert len(planned) == 1 and all(c["family"] == "wgrad_direct" for c in configs if not c["planned"])
    assert {c["spk"] for c in configs if c["family"] == "wgrad_direct"} == {1, 2}
    assert all(c["passed"] for c in configs)


def test_bench_table(capsys):
    assert main(["bench", "--shape", "name=tiny,N=1,C=3,L=20,k=4,g=3", "--dtype", "fp32", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "== tiny" in out and "<- plan" in out
    assert ("timings mean nothing" in out) == (not torch.cuda.is_available())
    assert "time_ms" in out and "time_us" not in out  # one unit, as in --json and the results CSV


def test_explain_and_compile(capsys):
    assert main(["explain", "--shape", "N=32,C=144,H=56,W=56,k=3,g=144", "--target", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "choice:" in out and "wgrad_splitk" in out and "rule:" in out


def test_bad_shape_is_a_clear_error(capsys):
    assert main(["explain", "--shape", "N=2,C=6,H=5,W=5,k=3,g=4"]) == 2
    assert "in_channels=6 is not divisible by groups=4" in capsys.readouterr().err


def test_shape_parsing(tmp_path):
    label, p = parse_shape("N=32,C=144,H=56,W=56,k=3,s=2,g=144")
    assert p.is_depthwise and p.stride == (2, 2) and p.padding == ((1, 1), (1, 1)) and p.layout == "channels_last"
    _, p1 = parse_shape("N=4,C=8,L=100,k=31,g=8", dtype="fp16")
    assert p1.input_size == (100,) and p1.padding == ((15, 15),) and p1.dtype == "fp16"
    with pytest.raises(ValueError, match="unknown shape keys"):
        parse_shape("N=1,C=1,W=4,k=3,q=1")
    path = tmp_path / "shapes.csv"
    path.write_text("name,N,C,H,W,k,s,g\na,8,32,14,14,3,1,32\nb,8,32,14,14,5,2,32\n")
    rows = read_csv(str(path))
    assert [name for name, _ in rows] == ["a", "b"] and rows[1][1].filter_size == (5, 5)


# ------------------------------------------------------------- user errors
def error_of(capsys, argv) -> str:
    """The one error line of a refused command line, checked: exit status 2, nothing on stdout."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("convwgrad: error: "), captured.err
    return lines[0]


def argparse_error_of(capsys, argv) -> str:
    """argparse's refusal of a malformed option value: exit status 2, its message last."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, message", [
    (["bench", "--csv", "/nonexistent.csv"], "--csv /nonexistent.csv: No such file or directory"),
    (["explain", "--csv", "/tmp"], "--csv /tmp: Is a directory"),
    (["score", "/nonexistent.csv"], "results file /nonexistent.csv: No such file or directory"),
    (["score", "/tmp"], "results file /tmp: Is a directory"),
    (["sweep", "/nonexistent.csv", "-o", "out.csv"], "shapes file /nonexistent.csv: No such file or directory"),
], ids=["bench-missing", "explain-directory", "score-missing", "score-directory", "sweep-missing"])
def test_unreadable_file_is_one_error_line(capsys, argv, message):
    assert message in error_of(capsys, argv)


def test_sweep_output_in_a_missing_directory_is_refused_before_any_work(capsys, tmp_path):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k\ntiny,1,2,2,4,4,3\n")
    line = error_of(capsys, ["sweep", str(shapes), "-o", "/nonexistent/r.csv"])
    assert "--output /nonexistent/r.csv: directory /nonexistent does not exist" in line


def test_sweep_confirm_from_missing_file(capsys, tmp_path):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k\ntiny,1,2,2,4,4,3\n")
    line = error_of(capsys, ["sweep", str(shapes), "-o", str(tmp_path / "r.csv"), "--confirm-from", "/nonexistent.csv"])
    assert "--confirm-from /nonexistent.csv: No such file" in line


def test_no_shapes_and_empty_csv(capsys, tmp_path):
    assert "give --shape KEY=VALUE,... or --csv FILE" in error_of(capsys, ["explain"])
    empty = tmp_path / "empty.csv"
    empty.write_text("name,N,C,g,H,W,k\n")
    assert f"--csv {empty}: no shapes in it" in error_of(capsys, ["explain", "--csv", str(empty)])
    line = error_of(capsys, ["sweep", str(empty), "-o", str(tmp_path / "r.csv")])
    assert f"shapes file {empty}: no shapes in it" in line


def test_unknown_target_prints_no_header_first(capsys):
    line = error_of(capsys, ["explain", "--shape", TINY, "--target", "foo"])
    assert "unknown target profile 'foo'" in line and "sm_90" in line


@pytest.mark.parametrize("spec, message", [
    ("N=32,C=abc,H=5,W=5,k=3", "C='abc' is not an integer"),
    ("N=32,C=4,k=3", "no spatial size"),
    ("N=2,C=4,H=5,W=5,H=6,k=3,g=4", "H is given twice (H=5, H=6)"),
    ("N=2,C=4,H=5,W=5,L=6,k=3,g=4", "L is the length of a 1-D shape; this one also gives H, W"),
    ("N=2,C=4,H=5,W=5,kd=3,k=3", "kd sizes a dim this shape does not have"),
    ("N=2,C=4,H=5,W=5,k=3,g=4,G=2", "g=4 and its alias G=2 disagree"),
    ("C=4,H=5,W=5,k=3", "no N"),
    (TINY + ",layout=nhwc", "layout 'nhwc' is not supported; supported layouts: contiguous, channels_last"),
    (TINY + ",dtype=fp64", "dtype 'fp64' is not supported"),
], ids=["not-int", "no-spatial", "repeated", "L-with-HW", "stray-kd", "alias-clash", "no-N", "layout", "dtype"])
def test_bad_shape_names_the_shape_and_the_key(capsys, spec, message):
    line = error_of(capsys, ["explain", "--shape", spec])
    assert f"shape {spec!r}: " in line and message in line and "Attribute(" not in line


def test_problem_choice_errors_are_one_line():
    with pytest.raises(ValueError) as error:
        convwgrad.ConvProblem.build(batch=1, groups=1, in_channels=1, input_size=(4,), filter_size=3, layout="nhwc")
    assert str(error.value) == "layout 'nhwc' is not supported; supported layouts: contiguous, channels_last"


def test_csv_errors_name_file_and_line(tmp_path):
    path = tmp_path / "shapes.csv"
    path.write_text("name,N,C,g,H,W,k\n\nok,1,2,2,4,4,3\nbad,1,x,2,4,4,3\n")
    with pytest.raises(ValueError, match=r"shapes.csv:4: C='x' is not an integer"):
        read_csv(str(path))
    path.write_text("name,N,C,C,H,W,k\na,1,2,2,4,4,3\n")
    with pytest.raises(ValueError, match=r"shapes.csv:1: column C appears twice"):
        read_csv(str(path))


@pytest.mark.parametrize("argv, message", [
    (["explain", "--shape", TINY, "--split-k", "0"], "argument --split-k: 0 must be >= 1"),
    (["explain", "--shape", TINY, "--group-merge", "two"], "argument --group-merge: 'two' is not an integer"),
    (["bench", "--shape", TINY, "--splits", "1,0"], "argument --splits: 0 must be >= 1"),
    (["sweep", "s.csv", "-o", "r.csv", "--shard", "5/4"], "argument --shard: 5/4: I must be 0 to N-1"),
    (["sweep", "s.csv", "-o", "r.csv", "--shard", "abc"], "argument --shard: 'abc' is not I/N"),
], ids=["split-k-0", "group-merge", "splits-0", "shard-range", "shard-format"])
def test_malformed_option_values_are_named(capsys, argv, message):
    line = argparse_error_of(capsys, argv)
    assert message in line and "<lambda>" not in line


def test_changed_only_needs_confirm_from(capsys, tmp_path):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k\ntiny,1,2,2,4,4,3\n")
    line = error_of(capsys, ["sweep", str(shapes), "-o", str(tmp_path / "r.csv"), "--changed-only"])
    assert "--changed-only needs --confirm-from" in line


def test_score_refuses_a_shapes_file(capsys):
    corpus = str(REPO / "shapes" / "depthwise_published.csv")
    line = error_of(capsys, ["score", corpus])
    assert f"{corpus} is not a results file of `convwgrad sweep`: no column shape" in line
    line = error_of(capsys, ["score", "--replan", corpus, corpus])  # --replan reads several (a sweep, its confirms)
    assert f"{corpus} is not a results file of `convwgrad sweep`: no column shape" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="the size limit is the interpreter's")
def test_full_size_shape_in_the_interpreter_is_refused_with_the_way_around(capsys):
    line = error_of(capsys, ["bench", "--shape", FULL_SIZE, "--dtype", "bf16"])
    assert "1.3e+08 multiply-adds" in line and "hours" in line and "--allow-slow" in line


def test_progress_is_one_line_per_config_off_a_terminal(capsys):
    argv = ["bench", "--shape", "N=1,C=2,L=8,k=3,g=2", "--splits", "1", "--first-tile-only", "--dtype", "fp32"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "N=1,C=2,L=8,k=3,g=2: config 1/" in err and "\r" not in err


# ----------------------------------------------------- explain and compile
def test_explain_pins(capsys):
    argv = ["explain", "--shape", FULL_SIZE, "--target", "sm_90", "--family", "wgrad_merged", "--group-merge", "16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "choice:  wgrad_merged_" in out and "gm 16" in out
    assert "family='nope' is not registered" in error_of(capsys, ["explain", "--shape", TINY, "--family", "nope"])


def test_compile_for_a_target_that_compiles_nothing(capsys):
    line = error_of(capsys, ["compile", "--target", "interpreter", "--shape", TINY])
    assert "target interpreter compiles nothing" in line and "sm_90, gfx950, gfx942" in line


def test_compile_names_the_family_without_kernels(capsys):
    # the router gives undilated 3x3 depthwise layers to cuDNN on sm_90: nothing for Triton to build
    assert main(["compile", "--target", "sm_90", "--shape", FULL_SIZE]) == 0
    out = capsys.readouterr().out
    assert "the plan chose family aten, which has no Triton kernel; pin another with --family wgrad_merged" in out


def test_compile_a_pinned_family_without_triton_warnings():
    """A fresh process without TRITON_INTERPRET, as a user runs it: the ISA, and no warning of Triton's."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")}
    done = subprocess.run(
        [sys.executable, "-m", "convwgrad", "compile", "--target", "sm_90", "--shape", "N=2,C=32,L=64,k=31,g=32",
         "--family", "wgrad_merged", "--split-k", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "ptx: matrix [mma" in done.stdout
    assert "TRITON_DEFAULT_FP_FUSION" not in done.stderr and "Warning" not in done.stderr


def test_explain_warns_of_a_corrupt_tuning_cache(capsys, tmp_path, monkeypatch):
    cache = tmp_path / "tuned.json"
    cache.write_text("{not json")
    monkeypatch.setenv("CONVWGRAD_TUNING_CACHE", str(cache))
    assert main(["explain", "--shape", TINY, "--target", "gfx942"]) == 0
    assert f"convwgrad: warning: CONVWGRAD_TUNING_CACHE={cache}: ignored (JSONDecodeError" in capsys.readouterr().err
    cache.write_text("{still not json}")  # a new mtime: loaded, and refused, again
    os.utime(cache, (1, 1))
    with pytest.warns(UserWarning, match="ignored") as record:
        convwgrad.plan(parse_shape(TINY)[1], "gfx950")
    assert record[0].filename == __file__  # the caller's plan(), not pluggy's hook calling


def test_explain_for_graph_launches(capsys):
    """The same layer launched eagerly (cuDNN) and from CUDA graphs (the staged family)."""
    argv = ["explain", "--shape", FULL_SIZE, "--target", "sm_90", "--dtype", "bf16"]
    assert main(argv) == 0
    eager = capsys.readouterr().out
    assert main(argv + ["--launch", "graph"]) == 0
    graph = capsys.readouterr().out
    assert "choice:  aten_" in eager and "launched from CUDA graphs" not in eager
    assert "choice:  wgrad_staged_" in graph and "target:  sm_90: cuda, 132 CUs, warp 32, launched from CUDA graphs" in graph
    assert "--launch" in argparse_error_of(capsys, argv + ["--launch", "replay"])


def test_score_launch_needs_replan(capsys, tmp_path):
    from convwgrad.scoring import COLUMNS

    path = tmp_path / "results.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    assert "--launch graph replans the policy: it needs --replan" in error_of(capsys, ["score", str(path), "--launch", "graph"])
