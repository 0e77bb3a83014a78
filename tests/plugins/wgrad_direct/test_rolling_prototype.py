"""The rolling-window prototype (tools/proto_rolling.py, issue 10's next direct kernel until it is
measured faster than cuDNN): every version against float64 on shapes with border and interior strips,
a channel tail and stride 2, on the interpreter or the GPU. Runs before any bench of it so that a
timing is never of a wrong kernel."""

import importlib.util
import pathlib

import pytest
import torch

from support import DEVICE

_PATH = pathlib.Path(__file__).parents[3] / "tools" / "proto_rolling.py"
_SPEC = importlib.util.spec_from_file_location("proto_rolling", _PATH)
proto = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(proto)

#: (input shape, k, stride, pad, channels a program, columns a strip); 16x16 with 7x7 has interior
#: strips and rows (the unmasked body), 6 channels in blocks of 4 a tail, 17x17 stride 2 both
SHAPES = [((1, 4, 16, 16), 7, 1, 3, 4, 2), ((1, 6, 12, 12), 3, 1, 1, 4, 2), ((2, 4, 17, 17), 5, 2, 2, 4, 2)]
#: (filter rows a program, prefetch, unmasked interior, interior unroll, tail split, deferred
#: conversion): v1, v2, v3, v4's pipelined interior (with a second launch for the FY % rows tail) and
#: unrolled interior, and prefetched operands held in the input dtype until used
VERSIONS = [(None, False, False, 1, False, False), (2, True, False, 1, False, False), (3, False, True, 1, False, False),
            (2, True, True, 1, True, False), (2, False, True, 2, True, False), (2, True, True, 2, False, False),
            (2, True, True, 1, True, True), (3, True, False, 1, False, True)]


@pytest.mark.parametrize("fyb, prefetch, interior, unroll, tail_split, deferred", VERSIONS,
                         ids=["v1", "v2-prefetch", "v3-interior", "v4-pipelined-tail", "v4-unrolled-tail",
                              "v4-pipelined-unrolled", "deferred-pipelined-tail", "deferred-prefetch"])
@pytest.mark.parametrize("shape, k, stride, pad, block_c, bw", SHAPES, ids=["7x7", "3x3-tail", "5x5-s2"])
def test_rolling_versions_match_float64(shape, k, stride, pad, block_c, bw, fyb, prefetch, interior, unroll,
                                        tail_split, deferred):
    torch.manual_seed(0)
    x = torch.randn(shape, device=DEVICE).contiguous(memory_format=torch.channels_last)
    out_size = (shape[2] + 2 * pad - k) // stride + 1
    dy = torch.randn(shape[0], shape[1], out_size, out_size, device=DEVICE).contiguous(
        memory_format=torch.channels_last)
    cfg = proto.plan(shape, k, stride, pad, shape[1], block_c=block_c, bw=bw, row_chunk=5, target_programs=3,
                     fyb=fyb, prefetch=prefetch, interior=interior, unroll=unroll, tail_split=tail_split,
                     deferred=deferred)
    partials = torch.full((cfg["split"], shape[1], k, k), float("nan"), device=DEVICE)
    proto.run(x, dy, k, stride, pad, cfg, out=partials)
    assert not torch.isnan(partials).any(), "a partial was left unwritten"
    error = proto.rel(partials.sum(0).unsqueeze(1), proto.reference(x, dy, k, stride, pad).to(DEVICE))
    assert error < 1e-5, f"relative error {error:.2e}"
