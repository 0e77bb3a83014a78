"""``convwgrad sweep`` under torchrun (CPU: two ranks, gloo, the interpreter): the ranks shard
the shapes and rank 0 merges their rows into the same file a single process writes."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

import convwgrad
from convwgrad.cli import main

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")

SHAPES = "name,N,C,g,H,W,k\na,1,4,4,5,5,3\nb,1,2,2,4,6,3\nc,1,6,6,4,4,5\n"
FLAGS = ["--splits", "1", "--first-tile-only", "--no-progress", "--verify-only"]
#: the columns that name a row (the timings are empty: --verify-only)
KEY = ("shape", "kernel_name", "family", "passed", "planned", "error")


def rows(path: Path) -> list[tuple]:
    with open(path, newline="") as f:
        return [tuple(r[k] for k in KEY) for r in csv.DictReader(f)]


def sweep(tmp_path: Path, output: str, *extra: str, ranks: int = 0) -> subprocess.CompletedProcess:
    repo = Path(convwgrad.__file__).resolve().parents[1]
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
                if ranks else [sys.executable])
    command = [*launcher, "-m", "convwgrad", "sweep", "shapes.csv", "-o", output, *FLAGS, *extra]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture
def shapes(tmp_path):
    (tmp_path / "shapes.csv").write_text(SHAPES)
    return tmp_path


def test_two_ranks_write_the_rows_one_process_writes(shapes):
    sweep(shapes, "single.csv")
    done = sweep(shapes, "merged.csv", ranks=2)
    single, merged = rows(shapes / "single.csv"), rows(shapes / "merged.csv")
    assert [r[0] for r in single] == sorted(r[0] for r in single)  # the premise: rows in the file's order
    assert merged == single and len(single) > 3
    assert "merged 2 ranks: 3 shapes" in done.stdout
    assert not list(shapes.glob("merged.csv.rank*"))  # the parts are gone once merged


def test_resuming_under_torchrun_keeps_what_the_output_holds_and_adds_the_rest_in_order(shapes):
    sweep(shapes, "single.csv")
    single = rows(shapes / "single.csv")
    # an output cut off after shape a
    with open(shapes / "single.csv", newline="") as f:
        reader = csv.DictReader(f)
        kept = [r for r in reader if r["shape"] == "a"]
        fields = reader.fieldnames
    with open(shapes / "resumed.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    done = sweep(shapes, "resumed.csv", "--resume", ranks=2)
    assert rows(shapes / "resumed.csv") == single
    assert "resuming: 1 shapes already in resumed.csv" in done.stderr


def test_a_rank_without_shapes_does_not_merge_an_old_runs_part(shapes):
    (shapes / "one.csv").write_text(SHAPES.split("b,")[0])  # shape a only: rank 1 gets nothing to do
    sweep(shapes, "single.csv")
    with open(shapes / "single.csv", newline="") as f:
        reader = csv.DictReader(f)
        stale = [dict(r, shape="zzz") for r in reader if r["shape"] == "c"]
        fields = reader.fieldnames
    with open(shapes / "merged.csv.rank1-of-2", "w", newline="") as f:  # left by an interrupted run
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(stale)
    (shapes / "shapes.csv").write_text((shapes / "one.csv").read_text())
    sweep(shapes, "merged.csv", ranks=2)
    assert {r[0] for r in rows(shapes / "merged.csv")} == {"a"}
    assert not list(shapes.glob("merged.csv.rank*"))


def test_shard_and_torchrun_together_are_refused(shapes, monkeypatch, capsys):
    monkeypatch.chdir(shapes)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["sweep", "shapes.csv", "-o", "r.csv", "--shard", "0/2", *FLAGS]) != 0
    assert "--shard 0/2 under torchrun: torchrun's ranks already split the shapes" in capsys.readouterr().err


def test_rank_variables_inherited_without_torchrun_do_not_shard(shapes, monkeypatch):
    """A sweep started from inside a distributed job (RANK and WORLD_SIZE set, not by torchrun for
    this command) runs every shape itself and waits for no other rank."""
    monkeypatch.chdir(shapes)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["sweep", "shapes.csv", "-o", "r.csv", *FLAGS]) == 0
    assert {r[0] for r in rows(shapes / "r.csv")} == {"a", "b", "c"}
    assert not list(shapes.glob("r.csv.rank*"))
