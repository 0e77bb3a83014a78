"""The short-1-D family on a CUDA GPU with cuda-bindings (skipped otherwise): dW against float64 over
NaN-poisoned dW and workspace in both layouts and both dtypes, the kernel meant to run did run (16-byte
loads where the strides allow, else the strided kernel, bitwise equal to it), misaligned and strided
operands read in place, splits past the chunks and bitwise-repeatable splits, CUDA-graph capture, and no
local memory in NVRTC's builds."""

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.plugins.wgrad_short1d import launcher
from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
from convwgrad.provider.blocks import nvrtc
from convwgrad.provider.dispatch import dispatch_conv_grouped
from convwgrad.provider.problem import LAYOUTS
from convwgrad.provider.reference import TOLERANCE
from support import assert_bitwise_repeatable, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(launcher._bindings()[1] is not None, reason="needs cuda-bindings")]
FAMILY = "wgrad_short1d"

LAYERS = {  # Mamba (causal k=4) at a small batch, centred and causal filters of 2-9 taps, odd lengths, tails
    "mamba-causal-k4": dict(batch=2, groups=64, in_channels=64, input_size=(2048,), filter_size=4,
                            padding=((3, 0),)),
    "k3-centred-c256": dict(batch=4, groups=256, in_channels=256, input_size=(512,), filter_size=3, padding=1),
    "k9-centred-c8": dict(batch=2, groups=8, in_channels=8, input_size=(520,), filter_size=9, padding=4),
    "k9-causal-c8": dict(batch=3, groups=8, in_channels=8, input_size=(300,), filter_size=9, padding=((8, 0),)),
    "k9-anticausal-c8": dict(batch=3, groups=8, in_channels=8, input_size=(264,), filter_size=9,
                             padding=((0, 8),)),
    "k5-d2-c8": dict(batch=2, groups=8, in_channels=8, input_size=(304,), filter_size=5, padding=4, dilation=2),
    "odd-c6-l77-k3": dict(batch=3, groups=6, in_channels=6, input_size=(77,), filter_size=3, padding=1),
    "k2-one-position-c4": dict(batch=3, groups=4, in_channels=4, input_size=(1,), filter_size=2, padding=((0, 1),)),
    "k1-c8": dict(batch=2, groups=8, in_channels=8, input_size=(65,), filter_size=1, padding=0),
    "over-padded-c8": dict(batch=2, groups=8, in_channels=8, input_size=(40,), filter_size=3, padding=8),
    "one-long-image-c4": dict(batch=1, groups=4, in_channels=4, input_size=(100_000,), filter_size=4,
                              padding=((3, 0),)),
    # Mamba's own conv1d: padding 3 each side (the output is cut to L after it), grad_output rows L + 3 long
    "mamba-pad3-c16": dict(batch=2, groups=16, in_channels=16, input_size=(1024,), filter_size=4, padding=3),
}


def _poisoned_run(bound, problem, chosen, x, dy):
    out = torch.full(problem.weight_size, float("nan"), dtype=x.dtype, device="cuda")
    workspace = torch.empty(chosen.workspace_nbytes, dtype=torch.uint8, device="cuda")
    workspace.view(torch.float32).fill_(float("nan"))
    bound.run(x, dy, out, workspace)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and torch.isfinite(workspace.view(torch.float32)).all()
    return out


def _expected_kernel(problem) -> str:
    """The stage-1 kernel make_inputs' operands (dense, aligned) take: 16-byte loads of each operand in NCHW
    whose rows are multiples of 8 elements long (or that is one row)."""
    def vectors(length):
        return problem.layout == "contiguous" and (length % 8 == 0 or problem.batch * problem.out_channels == 1)

    return launcher.stage1_kernel_name(vectors(problem.input_size[0]), vectors(problem.output_size[0]))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_short1d_vs_reference(layer, dtype, layout):
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout=layout)
    outcome = run_checked(p, family=FAMILY, device="cuda", inputs=make_inputs(p, "cuda"))
    assert outcome.launches[0].family == FAMILY
    assert outcome.launches[0].kernels[0] == _expected_kernel(p), outcome.launches
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", ["mamba-causal-k4", "k9-centred-c8", "k9-anticausal-c8", "k5-d2-c8",
                                   "one-long-image-c4"])
def test_every_load_kind_gives_the_same_bits(layer, dtype):
    """The same FMAs in the same order in all four kernels; only the loads differ. An operand copied one
    element into a buffer (same strides, pointer 2 bytes off the 16-byte grid) takes element loads."""
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout="contiguous")
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family=FAMILY, split_k=3)
    bound = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None)
    got = _poisoned_run(bound, p, chosen, x, dy)
    assert bound.kernels[0] == "wgrad_short1d_kernel"
    x_off = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")[1:].view(x.shape).copy_(x)
    dy_off = torch.empty(dy.numel() + 1, dtype=dy.dtype, device="cuda")[1:].view(dy.shape).copy_(dy)
    for operands, kernel in (((x, dy_off), "wgrad_short1d_xvec_kernel"), ((x_off, dy), "wgrad_short1d_dyvec_kernel"),
                             ((x_off, dy_off), "wgrad_short1d_strided_kernel")):
        want = _poisoned_run(bound, p, chosen, *operands)
        assert bound.kernels[0] == kernel
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), kernel
    assert relative_error(got, reference_weight_grad(p, x, dy)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("split_k", [2, 7, 64])
def test_splits_past_the_chunks_and_bitwise_repeatable(split_k, layout):
    for layer in ("odd-c6-l77-k3", "one-long-image-c4", "mamba-causal-k4", "mamba-pad3-c16"):
        p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout=layout)
        inputs = make_inputs(p, "cuda")
        outcome = run_checked(p, family=FAMILY, device="cuda", inputs=inputs, split_k=split_k)
        assert_close_to_reference(outcome, p)
        assert_bitwise_repeatable(p, outcome.plan, *inputs)


def test_operands_with_other_strides_are_read_in_place():
    """Mamba's conv1d input as its block makes it ((N, L, 2D) split and transposed to (N, D, L): channel
    stride 1, sequence stride 2D) and a grad_output view with padded rows."""
    p = ConvProblem.build(**LAYERS["mamba-causal-k4"], dtype="bf16", layout="contiguous")
    x, dy = make_inputs(p, "cuda")
    xz = torch.randn(x.shape[0], x.shape[2], 2 * x.shape[1], device="cuda").to(x.dtype)
    mamba_x = xz[..., :x.shape[1]].transpose(1, 2)
    mamba_x.copy_(x)
    wide_dy = torch.randn(*dy.shape[:2], dy.shape[2] + 8, device="cuda").to(dy.dtype)[..., 8:]
    wide_dy.copy_(dy)   # rows 2056 apart: multiples of 8, and the pointer 16 bytes in: still the vector kernel
    chosen = convwgrad.plan(p, "cuda", family=FAMILY)
    reference = reference_weight_grad(p, x, dy)
    for x_view, dy_view, kernel in ((mamba_x, dy, "wgrad_short1d_dyvec_kernel"),
                                    (x, wide_dy, "wgrad_short1d_kernel")):
        with convwgrad.record_launches() as log:
            out = dispatch_conv_grouped(p, x_view, dy_view, plan=chosen)
        assert [r.family for r in log] == [FAMILY] and log[0].kernels[0] == kernel, log
        assert relative_error(out, reference) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_captured_in_a_cuda_graph(layout):
    """cuLaunchKernel on the capturing stream: a captured call replays the eager dW bit for bit, and
    follows new inputs copied into the captured ones."""
    p = ConvProblem.build(**LAYERS["mamba-causal-k4"], dtype="bf16", layout=layout)
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family=FAMILY)
    eager = dispatch_conv_grouped(p, x, dy, plan=chosen)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dispatch_conv_grouped(p, x, dy, plan=chosen)  # warm: build and prepare outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = dispatch_conv_grouped(p, x, dy, plan=chosen)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.int16), eager.view(torch.int16))
    x2, dy2 = make_inputs(p, "cuda")
    x.copy_(x2)
    dy.copy_(dy2)
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(captured, reference_weight_grad(p, x2, dy2)) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_nvrtc_builds_have_no_local_memory(layer, dtype):
    """The kernels as NVRTC builds them here (its ptxas may differ from the nvcc the CPU test runs)."""
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype)
    arch = "%d%d" % torch.cuda.get_device_capability()
    for name in launcher.KERNEL_NAMES:
        _, function = launcher.function(arch, launcher.build_options(p), torch.cuda.current_device(), name)
        assert nvrtc.local_memory_bytes(function) == 0, name
