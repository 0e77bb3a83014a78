"""The shared stage 2 (the fixed-order sum of split-K partials): every element summed, any split
degree (ragged last step of splits), any dW size (ragged last block), bitwise repeatable, and the
grid sized so that small dW still spreads over many programs."""

import math

import pytest
import torch

from convwgrad.provider import ConvProblem
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.blocks.jit import _splitk_reduce_kernel
from convwgrad.provider.spec import KernelSpec
from tests.support import DEVICE


def depthwise(channels: int, filter_size: tuple[int, int]) -> ConvProblem:
    return ConvProblem(batch=2, groups=channels, in_channels=channels, out_channels=channels, input_size=(9, 9),
                       filter_size=filter_size, padding=tuple((f // 2, f // 2) for f in filter_size), stride=(1, 1), dilation=(1, 1),
                       dtype="fp32", layout="channels_last")


def reduce(problem: ConvProblem, partials: torch.Tensor, out: torch.Tensor, split_k: int):
    spec = KernelSpec(family="wgrad_splitk", dtype=problem.dtype, split_k=split_k)
    args = shared.stage2_args(problem, spec, partials, out)
    constexprs = {name: value.value for name, value in args if isinstance(value, shared.Constexpr)}
    values = [value for _, value in args if not isinstance(value, shared.Constexpr)]
    _splitk_reduce_kernel[shared.reduce_grid(problem)](*values, **constexprs, num_warps=shared.REDUCE_WARPS)


# (channels, filter, split_k): a ragged last element block, splits below, at and above a step's rows
CASES = [(3, (3, 3), 2), (5, (7, 7), 37), (6, (5, 3), 128), (40, (3, 3), 131), (7, (1, 1), 5)]


@pytest.mark.parametrize("channels, filter_size, split_k", CASES)
def test_reduction_sums_every_split_of_every_element(channels, filter_size, split_k):
    problem = depthwise(channels, filter_size)
    total = math.prod(problem.weight_size)
    partials = torch.randn(split_k, total, dtype=torch.float32, device=DEVICE)
    out = torch.full(problem.weight_size, float("nan"), dtype=torch.float32, device=DEVICE)
    reduce(problem, partials, out, split_k)
    expected = partials.double().sum(0).reshape(problem.weight_size)
    assert torch.isfinite(out).all(), "stage 2 left dW elements unwritten"
    error = ((out.double() - expected).norm() / expected.norm()).item()
    assert error < 1e-6, error
    again = torch.full_like(out, float("nan"))
    reduce(problem, partials, again, split_k)
    assert torch.equal(out, again), "stage 2 is not bitwise repeatable"


def test_reduction_reads_only_its_splits():
    """Partials past split_k (a caller's larger workspace) must not leak into dW."""
    problem, split_k = depthwise(4, (3, 3)), 6
    total = math.prod(problem.weight_size)
    partials = torch.randn(split_k + 3, total, dtype=torch.float32, device=DEVICE)
    partials[split_k:] = float("nan")
    out = torch.full(problem.weight_size, float("nan"), dtype=torch.float32, device=DEVICE)
    reduce(problem, partials, out, split_k)
    expected = partials[:split_k].double().sum(0).reshape(problem.weight_size)
    assert torch.allclose(out.double(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("channels, filter_size", [(96, (7, 7)), (1024, (31, 31)), (3, (3, 3)), (768, (7, 7))])
def test_reduction_grid_spreads_small_dw(channels, filter_size):
    """Small dW gets small blocks (many programs); a step loads REDUCE_TILE partials at most, never more
    split rows than there are splits."""
    problem = depthwise(channels, filter_size)
    total, block = math.prod(problem.weight_size), shared.reduce_block(problem)
    programs = shared.reduce_grid(problem)[0]
    assert programs * block >= total > (programs - 1) * block
    assert programs >= shared.REDUCE_PROGRAMS or block == shared.REDUCE_MIN_BLOCK
    assert block == shared.REDUCE_BLOCK or math.ceil(total / (2 * block)) < shared.REDUCE_PROGRAMS
    for split_k in (2, 3, 64, 598, 1024):
        rows = shared.reduce_split_block(problem, split_k)
        assert rows * block <= shared.REDUCE_TILE and rows < 2 * split_k and rows & (rows - 1) == 0
