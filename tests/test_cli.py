"""The convwgrad command on tiny shapes (Triton interpreter)."""

import json

import pytest
import torch

from convwgrad.cli import main
from convwgrad.shapes import parse_shape, read_csv


def test_bench_json_ranks_and_marks_plan(capsys):
    assert main(["bench", "--shape", "N=2,C=4,H=5,W=5,k=3,g=4", "--json", "--no-progress", "--dtype", "fp16"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    configs = result["configs"]
    assert sum(c["planned"] for c in configs) == 1
    assert {c["family"] for c in configs} == {"wgrad_merged", "wgrad_splitk", "aten"}
    assert all(c["passed"] and c["time_ms"] > 0 for c in configs)
    assert len({c["kernel_name"] for c in configs}) == len(configs)


def test_bench_table(capsys):
    assert main(["bench", "--shape", "name=tiny,N=1,C=3,L=20,k=4,g=3", "--dtype", "fp32", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "== tiny" in out and "<- plan" in out
    assert ("timings mean nothing" in out) == (not torch.cuda.is_available())


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
