"""Run one planned config of one layer a few times (GPU machine): the process to put under ncu.

  python tools/run_config.py --shape N=64,C=96,H=56,W=56,k=7,g=96 --family wgrad_direct [--split-k 176]
      [--tile m32n64k2w4s1] [--group-merge 8] [--calls 3]

``--tile`` takes a Tile's name (``m{block_m}n{block_n}k{block_k}w{num_warps}s{num_stages}``).
Prints the plan's kernel name and rule; the kernels launched are the ones ncu sees.
"""

import argparse
import re

import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import Tile
from convwgrad.shapes import parse_shape


def tile_from_name(name: str) -> Tile:
    match = re.fullmatch(r"m(\d+)n(\d+)k(\d+)w(\d+)s(\d+)", name)
    if not match:
        raise SystemExit(f"--tile {name!r}: expected m<block_m>n<block_n>k<block_k>w<warps>s<stages>")
    m, n, k, w, s = map(int, match.groups())
    return Tile(block_m=m, block_n=n, block_k=k, num_warps=w, num_stages=s)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--layout", default="channels_last")
    parser.add_argument("--family")
    parser.add_argument("--split-k", type=int)
    parser.add_argument("--group-merge", type=int)
    parser.add_argument("--tile")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args(argv)
    _, problem = parse_shape(args.shape, layout=args.layout)
    pins = {key: value for key, value in (("family", args.family), ("split_k", args.split_k),
                                          ("group_merge", args.group_merge)) if value is not None}
    if args.tile:
        pins["tile"] = tile_from_name(args.tile)
    on_gpu = torch.cuda.is_available()  # without one: a dry run in the interpreter (tiny shapes)
    chosen = convwgrad.plan(problem, "cuda" if on_gpu else None, **pins)
    print(chosen.kernel_name, "|", chosen.rule, flush=True)
    x, dy = make_inputs(problem, "cuda" if on_gpu else "cpu")
    for _ in range(args.calls):
        convwgrad.dispatch_conv_grouped(problem, x, dy, plan=chosen)
    if on_gpu:
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
