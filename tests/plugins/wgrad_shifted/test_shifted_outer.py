"""The shifted family's outer-product kernel (a tile with block_n >= 128, pinned): numerics against
float64 in the interpreter, the gate, determinism, mutations, and its sm_90 / gfx950 ISA."""

import pytest
import torch

import convwgrad
from convwgrad import aot
from convwgrad.bench import make_inputs
from convwgrad.plugins import wgrad_shifted
from convwgrad.plugins.wgrad_shifted import launcher
from convwgrad.provider import ConvProblem, Tile, reference_weight_grad, relative_error
from convwgrad.provider.reference import TOLERANCE
from convwgrad.provider.target import resolve_target
from shifted_cases import COMMON_CASES
from support import DEVICE, assert_bitwise_repeatable, assert_close_to_reference, run_checked

pytestmark = pytest.mark.usefixtures("no_tf32")

FAMILY = "wgrad_shifted"
KERNEL = "_wgrad_shifted_outer_kernel"

CASES = {
    **COMMON_CASES,
    "dilation3-asym": dict(batch=1, groups=2, in_channels=2, input_size=(13, 12), filter_size=3, dilation=3,
                           padding=((2, 4), (3, 1))),
    "s2d2-asym": dict(batch=3, groups=2, in_channels=2, input_size=(11, 10), filter_size=5, stride=2, dilation=2,
                      padding=((3, 4), (4, 2))),
    "kx1-swapped": dict(batch=1, groups=2, in_channels=2, input_size=(11, 5), filter_size=(7, 1), padding=(3, 0)),
    # W and OW multiples of 8: NCHW runs with ALIGN = 4 (fp32) / 8 (bf16), 16-byte row segments.
    "aligned-w16": dict(batch=2, groups=2, in_channels=2, input_size=(6, 16), filter_size=(3, 7), padding=(1, 3)),
    "tall-aligned": dict(batch=3, groups=2, in_channels=2, input_size=(17, 16), filter_size=5, padding=2),
    "aligned-w24-pad5": dict(batch=2, groups=2, in_channels=2, input_size=(5, 24), filter_size=11, padding=5),
}


def outer(problem, block_ow=16, block_k=16, ky_chunk=1) -> Tile:
    return wgrad_shifted.outer_tile(problem, block_ow, block_k, ky_chunk)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference_fp32(case, layout):
    p = ConvProblem.build(**CASES[case], dtype="fp32", layout=layout)
    outcome = run_checked(p, family=FAMILY, tile=outer(p), split_k=1)
    assert outcome.launches[0].kernels[0] == KERNEL
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case", ["dw13-prime", "s2d2-asym", "conv1d-k31", "aligned-w24-pad5"])
def test_matches_reference_half(case, dtype):
    p = ConvProblem.build(**CASES[case], dtype=dtype, layout="contiguous")
    assert_close_to_reference(run_checked(p, family=FAMILY, tile=outer(p), split_k=1), p)


def test_aligned_path_is_taken():
    p = ConvProblem.build(**CASES["aligned-w24-pad5"], dtype="bf16", layout="contiguous")
    x, dy = make_inputs(p, DEVICE)
    assert launcher.outer_alignable(p) == 8 and launcher.outer_align(p, x, dy) == 8
    cl = ConvProblem.build(**CASES["aligned-w24-pad5"], dtype="bf16", layout="channels_last")
    assert launcher.outer_alignable(cl) == 1


@pytest.mark.parametrize("case, block_ow, block_k, ky_chunk, split_k", [
    ("dw5x5-odd", 16, 16, 1, 1),  # 1 step: the whole reduction in one program
    ("s2d2-asym", 16, 16, 2, 1),  # two ky a program
    ("aligned-w24-pad5", 16, 16, 1, 1),  # two column blocks a program
    ("tall-aligned", 16, 16, 2, 3),  # 51 (n, oh) rows in 4 steps: three splits (the last one short)
    ("tall-aligned", 16, 16, 1, 4),
    ("conv1d-k31", 32, 16, 1, 1),  # 1-D: the length is the GEMM's axis
    ("dw13-prime", 16, 16, 4, 1),  # ky chunk past FY's end: masked ky
])
def test_tiles_chunks_and_splits(case, block_ow, block_k, ky_chunk, split_k):
    p = ConvProblem.build(**CASES[case], dtype="fp32", layout="contiguous")
    tile = outer(p, block_ow, block_k, ky_chunk)
    outcome = run_checked(p, family=FAMILY, tile=tile, split_k=split_k)
    assert outcome.plan.spec.tile == tile and outcome.plan.split_k == split_k
    assert outcome.plan.grid[0] == (p.out_channels * split_k, launcher.outer_geometry(p, outcome.plan.spec).ky_chunks, 1)
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("split_k", [1, 2])
def test_deterministic(split_k):
    p = ConvProblem.build(**CASES["tall-aligned"], dtype="bf16", layout="contiguous")
    x, dy = make_inputs(p, DEVICE)
    chosen = convwgrad.plan(p, DEVICE, family=FAMILY, tile=outer(p), split_k=split_k)
    assert_bitwise_repeatable(p, chosen, x, dy)


# ------------------------------------------------------------------------------------- gate
def test_gate_refuses_with_reasons():
    p = ConvProblem.build(**CASES["dw13-prime"], dtype="fp32", layout="contiguous")
    target = resolve_target(None)
    base = convwgrad.plan(p, family=FAMILY, tile=outer(p), split_k=1).spec
    blocked = base.__class__(**{**{f: getattr(base, f) for f in ("family", "dtype", "tile", "split_k")},
                                "group_merge": 2})
    assert any("group_merge=2" in r and "one channel a program" in r
               for r in wgrad_shifted.not_supported_reasons(p, blocked, target))
    narrow = base.__class__(family=FAMILY, dtype="fp32", split_k=1,
                            tile=Tile(block_m=64, block_n=128, block_k=16))  # 64 + 12 columns: NW 128 fits
    assert not wgrad_shifted.not_supported_reasons(p, narrow, target)
    wide_stride = ConvProblem.build(**dict(CASES["dw13-prime"], stride=(1, 3)), dtype="fp32")
    too_narrow = base.__class__(family=FAMILY, dtype="fp32", split_k=1, tile=Tile(block_m=64, block_n=128, block_k=16))
    reasons = wgrad_shifted.not_supported_reasons(wide_stride, too_narrow, target)
    assert any(r.startswith("block_n=128 is narrower") for r in reasons), reasons


def test_routing_and_candidates_unchanged():
    """Never offered: candidate_specs keeps block_n <= 64, so the router's first candidate is the
    shifted kernel's; the outer kernel runs only when pinned."""
    for layout in ("contiguous", "channels_last"):
        p = ConvProblem.build(batch=16, groups=128, in_channels=128, input_size=(56, 56), filter_size=31,
                              padding=15, dtype="bf16", layout=layout)
        specs = wgrad_shifted.candidate_specs(p, resolve_target("sm_90"))
        assert specs and not any(launcher.is_outer(s) for s in specs)
        assert not launcher.is_outer(convwgrad.plan(p, "sm_90", family=FAMILY).spec)


# -------------------------------------------------------------------------------- mutations
def _launch_mutated(p, tile, mutate):
    target = resolve_target(None)
    spec = convwgrad.plan(p, family=FAMILY, tile=tile, split_k=1).spec
    x, dy = make_inputs(p, DEVICE)
    out = torch.full(p.weight_size, float("nan"), dtype=x.dtype, device=DEVICE)
    original = launcher.outer_stage1_args

    def mutated(*args, **kwargs):
        return [(name, mutate(name, value)) for name, value in original(*args, **kwargs)]

    launcher.outer_stage1_args = mutated
    try:
        launcher.launch(p, spec, target, x, dy, out, None)
    finally:
        launcher.outer_stage1_args = original
    return relative_error(out, reference_weight_grad(p, x, dy))


@pytest.mark.parametrize("mutation", ["diagonal-dilation", "diagonal-stride", "column-shift", "row-shift"])
def test_suite_catches_a_wrong_diagonal(mutation):
    """A wrong diagonal offset fails the reference comparison: the diagonal's kx step (DIL_W is
    used only there), its ow step (STRIDE_W), the X segment's start (PAD_W), the ky row (PAD_H)."""
    case = {"diagonal-stride": "s2d2-asym"}.get(mutation, "dilation2")
    p = ConvProblem.build(**CASES[case], dtype="fp32", layout="contiguous")
    tile = outer(p)
    assert _launch_mutated(p, tile, lambda name, value: value) <= TOLERANCE["fp32"]  # the harness is sound
    target_name, by = {"diagonal-dilation": ("DIL_W", 1), "diagonal-stride": ("STRIDE_W", -1),
                       "column-shift": ("PAD_W", 1), "row-shift": ("PAD_H", 1)}[mutation]
    error = _launch_mutated(p, tile, lambda name, value: value + by if name == target_name else value)
    assert error > 100 * TOLERANCE["fp32"], f"{mutation}: error {error:.2e} not caught"


# -------------------------------------------------------------------------------------- ISA
def replknet_31(layout="contiguous"):
    return ConvProblem.build(batch=16, groups=128, in_channels=128, input_size=(56, 56), filter_size=31,
                             padding=15, dtype="bf16", layout=layout)


@pytest.mark.parametrize("target, op", [("sm_90", "mma.sync"), ("gfx950", "v_mfma")])
@pytest.mark.parametrize("block_ow, block_k, ky_chunk", [(16, 64, 2), (32, 32, 1)])
def test_isa_matrix_ops_16_byte_loads_no_spill(target, op, block_ow, block_k, ky_chunk):
    """NCHW bf16 with W = OW = 56: every X and dY row segment starts on 16 bytes (ALIGN 8)."""
    p = replknet_31()
    kernels = aot.compile(p, target, family=FAMILY, tile=outer(p, block_ow, block_k, ky_chunk), group_merge=1,
                          split_k=4)
    assert kernels[0].function == KERNEL
    isa = kernels[0].isa()
    assert sum(n for name, n in isa.matrix_instructions.items() if name.startswith(op)) > 0, isa
    assert isa.scratch_bytes in (0, None) and ".local" not in kernels[0].asm.get("ptx", ""), isa
    assert 16 in isa.global_loads and 2 not in isa.global_loads, isa  # gfx950 also has 4-byte scalar loads


def test_sm90_m64_tile_uses_wgmma():
    p = replknet_31()
    kernels = aot.compile(p, "sm_90", family=FAMILY, tile=outer(p, 64, 32, 1), group_merge=1, split_k=4)
    isa = kernels[0].isa()
    assert any(name.startswith("wgmma.mma_async") for name in isa.matrix_instructions), isa
    assert ".local" not in kernels[0].asm["ptx"], isa
