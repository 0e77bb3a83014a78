"""The staged family on a CUDA GPU (skipped without one): dW against float64 over NaN-poisoned dW
and workspace, the family meant to run did run, bitwise-repeatable splits, CUDA-graph capture."""

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, Tile
from convwgrad.provider.dispatch import dispatch_conv_grouped
from support import GPU_LAYERS, assert_bitwise_repeatable, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
FAMILY = "wgrad_staged"

LAYERS = {name: GPU_LAYERS[name] for name in ("mobilenetv2-144x56", "mobilenetv2-s2", "efficientnet-k5",
                                              "convnext-k7")}
LAYERS["convnext-k7-n64-c768"] = dict(batch=64, groups=768, in_channels=768, input_size=(7, 7), filter_size=7,
                                      padding=3)
#: a channel tail (48 = 32 + 16), a strip tail, a non-square filter with asymmetric padding
LAYERS["odd-3x5-asym"] = dict(batch=3, groups=48, in_channels=48, input_size=(15, 13), filter_size=(3, 5),
                              padding=((1, 0), (2, 1)))
LAYERS["tiny-1x1-rows"] = dict(batch=2, groups=32, in_channels=32, input_size=(1, 16), filter_size=1)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_staged_vs_reference(layer, dtype):
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout="channels_last")
    assert_close_to_reference(run_checked(p, family=FAMILY), p)


@pytest.mark.parametrize("tile", [
    Tile(block_m=32, block_n=8, block_k=4, num_warps=1, num_stages=3),    # short units: copies past a unit's end
    Tile(block_m=64, block_n=8, block_k=16, num_warps=2, num_stages=2),   # two warps
    Tile(block_m=32, block_n=16, block_k=8, num_warps=1, num_stages=4),   # three steps ahead, one strip
])
@pytest.mark.parametrize("split_k", [1, 5, 6])  # 6: one unit a split for the last two tiles
def test_staged_tiles_and_splits(tile, split_k):
    p = ConvProblem.build(**LAYERS["odd-3x5-asym"], dtype="bf16", layout="channels_last")
    assert_close_to_reference(run_checked(p, family=FAMILY, tile=tile, split_k=split_k), p)


def test_staged_bitwise_repeatable():
    p = ConvProblem.build(**LAYERS["convnext-k7"], dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    assert_bitwise_repeatable(p, convwgrad.plan(p, "cuda", family=FAMILY), x, dy)


def test_staged_captured_in_a_cuda_graph():
    """No host sync or allocation outside the caching allocator: a captured call replays the same dW."""
    p = ConvProblem.build(**LAYERS["mobilenetv2-144x56"], dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family=FAMILY)
    eager = dispatch_conv_grouped(p, x, dy, plan=chosen)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dispatch_conv_grouped(p, x, dy, plan=chosen)  # warm: compile and prepare outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = dispatch_conv_grouped(p, x, dy, plan=chosen)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.int16), eager.view(torch.int16))


def test_unaligned_operands_are_refused_by_name():
    p = ConvProblem.build(**LAYERS["mobilenetv2-144x56"], dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    storage = torch.empty(x.numel() + 8, dtype=x.dtype, device="cuda")
    shifted = storage[1:1 + x.numel()].view(x.shape[0], x.shape[2], x.shape[3], x.shape[1]).permute(0, 3, 1, 2)
    shifted.copy_(x)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        dispatch_conv_grouped(p, shifted, dy, plan=convwgrad.plan(p, "cuda", family=FAMILY))
