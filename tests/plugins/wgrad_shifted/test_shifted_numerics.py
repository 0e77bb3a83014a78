"""Shifted-view numerics against float64 (CPU: Triton interpreter, tiny shapes).

Every case runs over NaN-poisoned dW and workspace (support.run_checked: every element written,
wgrad_shifted ran), on fresh random inputs, and is judged by the relative Frobenius error.
"""

import attrs
import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.plugins.wgrad_shifted import launcher
from convwgrad.provider import ConvProblem, Tile, reference_weight_grad, relative_error
from convwgrad.provider.reference import TOLERANCE
from convwgrad.provider.target import resolve_target
from shifted_cases import COMMON_CASES
from support import DEVICE, assert_bitwise_repeatable, assert_close_to_reference, describe_mismatch, run_checked

pytestmark = pytest.mark.usefixtures("no_tf32")

FAMILY = "wgrad_shifted"
#: 16-lane steps, so tiny shapes still have several steps to split and rows to chunk.
SMALL = Tile(block_m=16, block_n=16, block_k=16)
#: kx = 5 -> an 8-row kx block, 8 ky groups folded into M = 64 (the wgmma-sized shape).
FOLDED = Tile(block_m=64, block_n=16, block_k=32)

CASES = {
    **COMMON_CASES,
    "dilation5-asym": dict(batch=1, groups=2, in_channels=2, input_size=(13, 12), filter_size=3, dilation=5,
                           padding=((4, 6), (5, 3))),
    "asym-pad": dict(batch=2, groups=2, in_channels=2, input_size=(6, 7), filter_size=(5, 3), padding=((0, 3), (2, 1))),
    "1xk-swapped": dict(batch=1, groups=2, in_channels=2, input_size=(5, 11), filter_size=(1, 7), padding=(0, 3)),
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference_fp32(case, layout):
    p = ConvProblem.build(**CASES[case], dtype="fp32", layout=layout)
    outcome = run_checked(p, family=FAMILY)
    assert outcome.launches[0].kernels[0] == "_wgrad_shifted_kernel"
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case", ["dw13-prime", "stride2", "conv1d-k31"])
def test_matches_reference_half(case, dtype):
    p = ConvProblem.build(**CASES[case], dtype=dtype, layout="channels_last")
    assert_close_to_reference(run_checked(p, family=FAMILY), p)


@pytest.mark.parametrize("case, tile, split_k", [
    ("dw5x5-odd", SMALL, 3),  # split over (n, row blocks): 2 images x 7 rows of 16 lanes
    ("dilation5-asym", SMALL, 2),
    ("conv1d-k31", SMALL, 4),
    ("asym-pad", FOLDED, 1),  # 8 ky groups folded into M (only 1 real: the rest masked)
    ("dw13-prime", Tile(block_m=64, block_n=16, block_k=16), 2),  # kx 16 x 4 folds: ky 0-15 | 16-31 ...
    ("stride3x2", FOLDED, 1),
])
def test_tiles_folds_and_splits(case, tile, split_k):
    p = ConvProblem.build(**CASES[case], dtype="fp32", layout="contiguous")
    outcome = run_checked(p, family=FAMILY, tile=tile, split_k=split_k)
    assert outcome.plan.spec.tile == tile and outcome.plan.split_k == split_k
    assert_close_to_reference(outcome, p)


#: Channel-block cases: 8 channels so group_merge 2-8 divide them.
BLOCK_CASES = {
    "dw7x7-cb": dict(batch=2, groups=8, in_channels=8, input_size=(9, 11), filter_size=7, padding=3),
    "stride2-dil2-asym-cb": dict(batch=2, groups=8, in_channels=8, input_size=(11, 10), filter_size=5, stride=2,
                                 dilation=2, padding=((3, 4), (4, 2))),
    "conv1d-k31-cb": dict(batch=2, groups=8, in_channels=8, input_size=(37,), filter_size=31, padding=15),
}


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("layout, gm", [("channels_last", 8), ("channels_last", 2), ("contiguous", 4)])
@pytest.mark.parametrize("case", sorted(BLOCK_CASES))
def test_channel_blocks(case, layout, gm, dtype):
    """group_merge adjacent channels per program (3-D tl.dot), split or not."""
    p = ConvProblem.build(**BLOCK_CASES[case], dtype=dtype, layout=layout)
    outcome = run_checked(p, family=FAMILY, group_merge=gm, split_k=1 if gm == 8 else 2, tile=SMALL)
    assert outcome.launches[0].kernels[0] == "_wgrad_shifted_cblock_kernel"
    assert outcome.plan.grid[0][0] == p.out_channels // gm * outcome.plan.split_k
    assert_close_to_reference(outcome, p)


def test_pinned_family_on_channels_last_runs_channel_blocks():
    p = ConvProblem.build(**BLOCK_CASES["dw7x7-cb"], dtype="bf16", layout="channels_last")
    outcome = run_checked(p, family=FAMILY)
    assert outcome.plan.group_merge == 8 and outcome.launches[0].kernels[0] == "_wgrad_shifted_cblock_kernel"
    assert_close_to_reference(outcome, p)


def test_wide_rows_are_chunked():
    """OW = 40 over 16-lane steps: three column chunks a row, the last one 8 wide."""
    p = ConvProblem.build(batch=1, groups=2, in_channels=2, input_size=(5, 40), filter_size=(3, 5), padding=(1, 2),
                          dtype="fp32", layout="channels_last")
    geometry = launcher.tile_geometry(p, convwgrad.plan(p, family=FAMILY, tile=SMALL).spec)
    assert (geometry.seg, geometry.col_chunks, geometry.whole_rows) == (16, 3, False)
    assert_close_to_reference(run_checked(p, family=FAMILY, tile=SMALL, split_k=2), p)


def test_small_maps_pack_rows():
    """A 7-wide map packs 9 rows into a 64-lane step (the reduction tile stays full)."""
    p = ConvProblem.build(batch=2, groups=2, in_channels=2, input_size=(7, 7), filter_size=13, padding=6,
                          dtype="bf16", layout="contiguous")
    spec = convwgrad.plan(p, family=FAMILY, tile=Tile(block_m=16, block_n=16, block_k=64)).spec
    geometry = launcher.tile_geometry(p, spec)
    assert (geometry.seg, geometry.rows_per_step) == (7, 9)
    assert_close_to_reference(run_checked(p, family=FAMILY, tile=spec.tile), p)


@pytest.mark.parametrize("view", ["crop", "channel-slice"])
def test_non_contiguous_views(view):
    """The strides passed in are the ones used: a spatial crop and every other channel."""
    big_x = torch.randn(2, 6, 12, 13, dtype=torch.float32, device=DEVICE)
    big_dy = torch.randn(2, 6, 12, 13, dtype=torch.float32, device=DEVICE)
    if view == "crop":
        x, dy = big_x[:, :3, 1:10, 2:12], big_dy[:, :3, :9, 1:11]
    else:
        x, dy = big_x[:, ::2, :9, :10], big_dy.to(memory_format=torch.channels_last)[:, 1::2, :9, :10]
    p = ConvProblem.from_tensors(x, (3, 1, 5, 5), dy, padding=2, groups=3)
    outcome = run_checked(p, family=FAMILY, inputs=(x, dy))
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("split_k, gm", [(1, 1), (3, 1), (3, 8)])
def test_deterministic(split_k, gm):
    case = CASES["dw5x5-odd"] if gm == 1 else BLOCK_CASES["dw7x7-cb"]
    p = ConvProblem.build(**case, dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, DEVICE)
    chosen = convwgrad.plan(p, DEVICE, family=FAMILY, tile=SMALL, split_k=split_k, group_merge=gm)
    assert_bitwise_repeatable(p, chosen, x, dy)


def test_each_tap_matches():
    """Each (channel, ky, kx) on its own: a shift off by one tap writes every element, but wrong."""
    p = ConvProblem.build(**CASES["dilation5-asym"], dtype="fp32", layout="channels_last")
    x, dy = make_inputs(p, DEVICE)
    out = convwgrad.dispatch_conv_grouped(p, x, dy, plan=convwgrad.plan(p, family=FAMILY, tile=SMALL, split_k=2))
    ref = reference_weight_grad(p, x, dy)
    bad = (out.double() - ref).abs() > 1e-4 * (1 + ref.abs())
    assert not bad.any(), f"{int(bad.sum())} taps wrong; " + describe_mismatch(out, ref)


# ---------------------------------------------------------------------------------- mutations
def _launch_mutated(p, mutate, group_merge=1):
    """Run the family's launcher directly with its stage-1 arguments passed through ``mutate``."""
    target = resolve_target(None)
    spec = convwgrad.plan(p, family=FAMILY, tile=SMALL, split_k=2, group_merge=group_merge).spec
    x, dy = make_inputs(p, DEVICE)
    out = torch.full(p.weight_size, float("nan"), dtype=x.dtype, device=DEVICE)
    workspace = torch.full((spec.split_k * out.numel(),), float("nan"), dtype=torch.float32, device=DEVICE)
    original = launcher.stage1_args

    def mutated(*args, **kwargs):
        return [(name, mutate(name, value)) for name, value in original(*args, **kwargs)]

    launcher.stage1_args = mutated
    try:
        launcher.launch(p, spec, target, x, dy, out, workspace.view(torch.uint8))
    finally:
        launcher.stage1_args = original
    return relative_error(out, reference_weight_grad(p, x, dy))


def _bump(target_name, by):
    return lambda name, value: value + by if name == target_name else value


@pytest.mark.parametrize("group_merge", [1, 8])
@pytest.mark.parametrize("mutation", ["row-shift", "column-shift", "dilation-dropped"])
def test_suite_catches_a_dropped_shift(mutation, group_merge):
    """The reference comparison fails when a shift is wrong: the row (ky) shift off by one row,
    the column (kx) shift off by one column, or the row dilation dropped; for both kernels."""
    case = dict(CASES["dilation2"], groups=8, in_channels=8)
    p = ConvProblem.build(**case, dtype="fp32", layout="channels_last")
    assert _launch_mutated(p, lambda name, value: value, group_merge) <= TOLERANCE["fp32"]  # the harness is sound
    mutate = {"row-shift": _bump("PAD_H", 1), "column-shift": _bump("PAD_W", -1),
              "dilation-dropped": _bump("DIL_H", -1)}[mutation]
    error = _launch_mutated(p, mutate, group_merge)
    assert error > 100 * TOLERANCE["fp32"], f"{mutation}: error {error:.2e} not caught"


def test_problem_reused_across_layouts_is_judged_by_strides():
    """A problem posed for NCHW but handed channels_last tensors of the same shape still matches:
    the kernel reads the strides it is given (the dispatcher binds them)."""
    p = ConvProblem.build(**CASES["dw5x5-odd"], dtype="fp32", layout="contiguous")
    x, dy = make_inputs(attrs.evolve(p, layout="channels_last"), DEVICE)
    out = convwgrad.dispatch_conv_grouped(p, x, dy, plan=convwgrad.plan(p, family=FAMILY))
    assert relative_error(out, reference_weight_grad(p, x, dy)) <= TOLERANCE["fp32"]
