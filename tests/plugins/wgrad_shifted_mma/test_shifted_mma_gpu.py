"""The shifted-MMA family on a CUDA GPU with cuda-bindings (skipped otherwise): dW against float64 over
NaN-poisoned dW and workspace in both layouts, the family and the stage-1 kernel meant to run did run,
the cooperative channels_last kernels bitwise equal to the kernel for any strides, bitwise-repeatable
splits, operands with other strides read in place, CUDA-graph capture, the router's choice and a
patched layer in each layout."""

import math

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.plugins.wgrad_shifted_mma import launcher
from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
from convwgrad.provider.dispatch import dispatch_conv_grouped
from convwgrad.provider.problem import LAYOUTS
from convwgrad.provider.reference import TOLERANCE
from support import assert_bitwise_repeatable, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(launcher._bindings()[1] is not None, reason="needs cuda-bindings")]
FAMILY = "wgrad_shifted_mma"

LAYERS = {  # RepLKNet-31B and UniRepLKNet at batch 4 (the float64 reference), odd and dilated shapes
    "replknet-31x31-56": dict(batch=4, groups=128, in_channels=128, input_size=(56, 56), filter_size=31, padding=15),
    "replknet-29x29-28": dict(batch=4, groups=256, in_channels=256, input_size=(28, 28), filter_size=29, padding=14),
    "replknet-27x27-14": dict(batch=4, groups=512, in_channels=512, input_size=(14, 14), filter_size=27, padding=13),
    "unireplknet-13x13-14": dict(batch=4, groups=320, in_channels=320, input_size=(14, 14), filter_size=13, padding=6),
    "odd-13-17x23": dict(batch=3, groups=5, in_channels=5, input_size=(17, 23), filter_size=13, padding=6),
    "k32-valid-64": dict(batch=1, groups=4, in_channels=4, input_size=(64, 64), filter_size=32, padding=0),
    "asym-7x3": dict(batch=5, groups=9, in_channels=9, input_size=(9, 11), filter_size=(7, 3),
                     padding=((3, 1), (0, 2))),
    "narrow-31x31-7-c37": dict(batch=4, groups=37, in_channels=37, input_size=(7, 7), filter_size=31, padding=15),
    "narrow-11x11-13-c24": dict(batch=4, groups=24, in_channels=24, input_size=(13, 13), filter_size=11, padding=5),
    "one-pixel": dict(batch=2, groups=3, in_channels=3, input_size=(1, 1), filter_size=3, padding=1),
    "channel-tail-6": dict(batch=2, groups=6, in_channels=6, input_size=(40, 41), filter_size=31, padding=0),
    "odd-c8-19x61": dict(batch=3, groups=8, in_channels=8, input_size=(19, 61), filter_size=(9, 29),
                         padding=((4, 0), (14, 3))),
    "asym-c12-5x3": dict(batch=5, groups=12, in_channels=12, input_size=(9, 11), filter_size=(5, 3),
                         padding=((2, 1), (0, 2))),
    "one-pixel-c8": dict(batch=2, groups=8, in_channels=8, input_size=(1, 1), filter_size=3, padding=1),
    "k16-edge-c8": dict(batch=3, groups=8, in_channels=8, input_size=(20, 33), filter_size=16,
                        padding=((8, 7), (3, 12))),   # the largest filter of the 16 x 16 tap tile
    "top-pad-31-c8": dict(batch=3, groups=8, in_channels=8, input_size=(6, 6), filter_size=32,
                          padding=((31, 0), (0, 31))),   # no row above the image is read
    # dilated (the _dilated_cols kernels where the column dilation is above 1): UniRepLKNet's branches
    "unireplknet-7x7-d2-14": dict(batch=4, groups=320, in_channels=320, input_size=(14, 14), filter_size=7,
                                  padding=6, dilation=2),
    "unireplknet-3x3-d5-7": dict(batch=4, groups=64, in_channels=64, input_size=(7, 7), filter_size=3, padding=5,
                                 dilation=5),
    "unireplknet-3x3-d3-28": dict(batch=4, groups=16, in_channels=16, input_size=(28, 28), filter_size=3, padding=3,
                                  dilation=3),
    "13x13-d2-span-24-c32": dict(batch=4, groups=32, in_channels=32, input_size=(14, 14), filter_size=13,
                                 padding=12, dilation=2),
    "asym-d3x4-c12": dict(batch=4, groups=12, in_channels=12, input_size=(11, 19), filter_size=(5, 3),
                          padding=((0, 7), (5, 2)), dilation=(3, 4)),   # no top padding, DH != DW, KH != KW
    "span-31-d31x1-c8": dict(batch=3, groups=8, in_channels=8, input_size=(40, 20), filter_size=(2, 17),
                             padding=((31, 0), (8, 8)), dilation=(31, 1)),   # the ring's limit, 32 x 32 tile
    "rows-d3-c6": dict(batch=3, groups=6, in_channels=6, input_size=(25, 30), filter_size=(9, 5),
                       padding=((12, 12), (2, 2)), dilation=(3, 1)),   # row dilation only: the DW = 1 kernels
    "row-reach-160-c4": dict(batch=2, groups=4, in_channels=4, input_size=(5, 64), filter_size=(3, 13),
                             padding=((1, 1), (48, 48)), dilation=(1, 8)),   # A reads to the staged copy's end
}


def _stage1_kernel(problem, channels=None):
    """The stage-1 kernel a call on make_inputs' operands (dense, aligned) in ``problem``'s layout runs:
    the cooperative one where the channels are adjacent, in channels_last, and in NCHW where the image
    is one pixel (its channel stride is 1 too)."""
    channels = launcher.COOPERATIVE_CHANNELS if channels is None else channels
    adjacent = problem.layout == "channels_last" or math.prod(problem.input_size) == 1
    if channels and adjacent and problem.out_channels % channels == 0:
        return launcher.stage1_kernel_name(problem, channels)
    return launcher.stage1_kernel_name(problem)


def _poisoned_run(bound, problem, chosen, x, dy):
    out = torch.full(problem.weight_size, float("nan"), dtype=x.dtype, device="cuda")
    workspace = torch.empty(chosen.workspace_nbytes, dtype=torch.uint8, device="cuda")
    workspace.view(torch.float32).fill_(float("nan"))
    bound.run(x, dy, out, workspace)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and torch.isfinite(workspace.view(torch.float32)).all()
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_shifted_mma_vs_reference(layer, dtype, layout):
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout=layout)
    outcome = run_checked(p, family=FAMILY, device="cuda", inputs=make_inputs(p, "cuda"))
    assert outcome.plan.spec.split_k >= 2
    assert outcome.launches[0].kernels[0] == _stage1_kernel(p), outcome.launches
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("channels", launcher.COOPERATIVE_CHANNEL_COUNTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_cooperative_kernels_equal_the_kernel_for_any_strides(layer, dtype, channels):
    """Each cooperative channels_last kernel (where its channel count divides C; else the kernel for any
    strides runs) over NaN-poisoned dW and workspace: bitwise equal to the kernel for any strides (a
    warp does the same MMAs in the same order; only the loads differ), and close to float64. Two
    splits, so that a CTA runs several images through one ring."""
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family=FAMILY, split_k=2)
    cooperative = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None, cooperative_channels=channels)
    general = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None, cooperative_channels=0)
    got = _poisoned_run(cooperative, p, chosen, x, dy)
    assert cooperative.kernels[0] == _stage1_kernel(p, channels)
    want = _poisoned_run(general, p, chosen, x, dy)
    assert general.kernels[0] == launcher.stage1_kernel_name(p)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert relative_error(got, reference_weight_grad(p, x, dy)) <= TOLERANCE[dtype]


def test_misaligned_channels_last_operands_take_the_kernel_for_any_strides():
    """channels_last strides the cooperative kernel admits, but a data pointer 2 bytes off its vector
    alignment (a storage offset): the same prepared call runs the kernel for any strides, correctly."""
    p = ConvProblem.build(**LAYERS["odd-c8-19x61"], dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    storage = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")
    shifted_x = storage[1:].as_strided(x.shape, x.stride())
    shifted_x.copy_(x)
    assert shifted_x.stride() == x.stride() and shifted_x.data_ptr() % 8 == 2
    chosen = convwgrad.plan(p, "cuda", family=FAMILY)
    bound = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None)
    aligned = _poisoned_run(bound, p, chosen, x, dy)
    assert bound.kernels[0] == _stage1_kernel(p)
    misaligned = _poisoned_run(bound, p, chosen, shifted_x, dy)
    assert bound.kernels[0] == launcher.stage1_kernel_name(p)
    assert torch.equal(aligned.view(torch.int16), misaligned.view(torch.int16))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("split_k", [2, 3, 7])
def test_splits_past_the_batch_and_bitwise_repeatable(split_k, layout):
    p = ConvProblem.build(**LAYERS["odd-13-17x23"], dtype="bf16", layout=layout)
    inputs = make_inputs(p, "cuda")
    outcome = run_checked(p, family=FAMILY, device="cuda", inputs=inputs, split_k=split_k)
    assert_close_to_reference(outcome, p)
    assert_bitwise_repeatable(p, outcome.plan, *inputs)


def test_operands_with_other_strides_are_read_in_place_not_misread():
    """Views with row padding (layout "contiguous", not contiguous) and a grad_output broadcast
    along the batch (stride 0, as ``expand`` gives) are read through their strides, correctly."""
    p = ConvProblem.build(**LAYERS["odd-13-17x23"], dtype="bf16", layout="contiguous")
    x, dy = make_inputs(p, "cuda")
    wide_x = torch.randn(*x.shape[:3], x.shape[3] + 5, device="cuda").to(x.dtype)[..., :x.shape[3]]
    wide_x.copy_(x)
    wide_dy = torch.randn(*dy.shape[:3], dy.shape[3] + 3, device="cuda").to(dy.dtype)[..., :dy.shape[3]]
    wide_dy.copy_(dy)
    broadcast_dy = dy[:1].expand_as(dy)
    assert not wide_x.is_contiguous() and not wide_dy.is_contiguous() and broadcast_dy.stride(0) == 0
    chosen = convwgrad.plan(p, "cuda", family=FAMILY)
    for x_view, dy_view in ((wide_x, wide_dy), (x, broadcast_dy)):
        with convwgrad.record_launches() as log:
            out = dispatch_conv_grouped(p, x_view, dy_view, plan=chosen)
        assert [r.family for r in log] == [FAMILY]
        reference = reference_weight_grad(p, x_view.contiguous(), dy_view.contiguous())
        assert relative_error(out, reference) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_captured_in_a_cuda_graph(layout):
    """cuLaunchKernel on the capturing stream: a captured call replays the same dW."""
    p = ConvProblem.build(**LAYERS["replknet-27x27-14"], dtype="bf16", layout=layout)
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


@pytest.mark.parametrize("layout", LAYOUTS)
def test_router_gives_it_its_measured_class_and_a_patched_layer_uses_it(layout):
    p = ConvProblem.build(**LAYERS["replknet-31x31-56"], dtype="bf16", layout=layout)
    chosen = convwgrad.plan(p, "cuda")
    assert chosen.family == FAMILY, chosen.rule
    torch.manual_seed(0)
    stock = torch.nn.Conv2d(128, 128, 31, padding=15, groups=128, bias=False).cuda()
    patched = convwgrad.patch(torch.nn.Conv2d(128, 128, 31, padding=15, groups=128, bias=False).cuda())
    patched.load_state_dict(stock.state_dict())
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    stock, patched = stock.to(memory_format=memory_format), patched.to(memory_format=memory_format)
    x = torch.randn(4, 128, 56, 56, device="cuda").to(memory_format=memory_format)
    dy = torch.randn(4, 128, 56, 56, device="cuda").to(memory_format=memory_format)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        stock(x).backward(dy)
        with convwgrad.record_launches() as log:
            patched(x).backward(dy)
    torch.cuda.synchronize()
    assert [r.family for r in log] == [FAMILY]
    assert log[0].kernels[0] == _stage1_kernel(p), log  # autograd's grad_output kept the layout
    reference = reference_weight_grad(p, x.bfloat16(), dy.bfloat16())
    assert relative_error(patched.weight.grad, reference) <= TOLERANCE["bf16"]
    assert relative_error(stock.weight.grad, reference) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("layer", ["narrow-31x31-7-c37", "narrow-11x11-13-c24"])
def test_router_gives_it_narrow_channels_last_rows_and_a_patched_layer_uses_it(layer):
    """The narrow-row classes (routing.SHIFTED_MMA_NARROW_ROWS*, session 21): an odd C on a 7x7 plane and an
    aligned one at 11x11 on 13 columns, channels_last, through a patched module's backward."""
    shape = LAYERS[layer]
    p = ConvProblem.build(**shape, dtype="bf16", layout="channels_last")
    assert convwgrad.plan(p, "cuda").family == FAMILY
    channels, k, size = shape["in_channels"], shape["filter_size"], shape["input_size"]
    torch.manual_seed(0)
    patched = convwgrad.patch(torch.nn.Conv2d(channels, channels, k, padding=k // 2, groups=channels, bias=False))
    patched = patched.cuda().to(memory_format=torch.channels_last)
    x = torch.randn(shape["batch"], channels, *size, device="cuda").to(memory_format=torch.channels_last)
    dy = torch.randn_like(x)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with convwgrad.record_launches() as log:
            patched(x).backward(dy)
    torch.cuda.synchronize()
    assert [r.family for r in log] == [FAMILY], log
    reference = reference_weight_grad(p, x.bfloat16(), dy.bfloat16())
    assert relative_error(patched.weight.grad, reference) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_kernel_built_by_nvrtc_has_no_local_memory(dtype):
    """The kernels as NVRTC builds them here (its ptxas may differ from the nvcc the CPU test runs):
    no spills (local memory) and no more than one CTA of registers."""
    driver = launcher._bindings()[0][0]
    arch = "%d%d" % torch.cuda.get_device_capability()
    for name in launcher.KERNEL_NAMES:
        _, function = launcher._function(dtype, arch, torch.cuda.current_device(), name)
        err, local = driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function)
        assert err == driver.CUresult.CUDA_SUCCESS and local == 0, (name, err, local)


SEQUENCE_LAYERS = {  # 1-D: Conformer, Mamba (causal), one long image (cut into units), the tap tile's edges
    "conformer-k31": dict(batch=4, groups=256, in_channels=256, input_size=(512,), filter_size=31, padding=15),
    "mamba-causal-k4": dict(batch=2, groups=64, in_channels=64, input_size=(2048,), filter_size=4,
                            padding=((3, 0),)),
    "one-long-image-k31": dict(batch=1, groups=8, in_channels=8, input_size=(16384,), filter_size=31, padding=15),
    "k128-c12": dict(batch=2, groups=12, in_channels=12, input_size=(300,), filter_size=128, padding=((64, 63),)),
    "odd-c6-k17": dict(batch=3, groups=6, in_channels=6, input_size=(77,), filter_size=17, padding=8),
    "one-position-c4": dict(batch=3, groups=4, in_channels=4, input_size=(1,), filter_size=3, padding=1),
    "k1-c8": dict(batch=2, groups=8, in_channels=8, input_size=(65,), filter_size=1, padding=0),
    # 1024 channels: one split an image, units of 33-65 steps (each step's writes beside the previous reads)
    "many-steps-c1024": dict(batch=2, groups=1024, in_channels=1024, input_size=(4096,), filter_size=31, padding=15),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", sorted(SEQUENCE_LAYERS))
def test_sequence_kernels_vs_reference(layer, dtype, layout):
    p = ConvProblem.build(**SEQUENCE_LAYERS[layer], dtype=dtype, layout=layout)
    outcome = run_checked(p, family=FAMILY, device="cuda", inputs=make_inputs(p, "cuda"))
    assert outcome.launches[0].kernels[0] == _stage1_kernel(p), outcome.launches
    assert "_seq" in outcome.launches[0].kernels[0]
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", sorted(SEQUENCE_LAYERS))
def test_sequence_cooperative_kernel_equals_the_kernel_for_any_strides(layer, dtype):
    """As for the 2-D kernels: the same MMAs in the same order, only the loads differ; three splits, so
    that a CTA runs several units (and the long image is cut)."""
    p = ConvProblem.build(**SEQUENCE_LAYERS[layer], dtype=dtype, layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family=FAMILY, split_k=3)
    cooperative = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None, cooperative_channels=4)
    general = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None, cooperative_channels=0)
    got = _poisoned_run(cooperative, p, chosen, x, dy)
    assert cooperative.kernels[0] == _stage1_kernel(p, 4)
    want = _poisoned_run(general, p, chosen, x, dy)
    assert general.kernels[0] == "wgrad_shifted_mma_seq_kernel"
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert relative_error(got, reference_weight_grad(p, x, dy)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("split_k", [2, 5, 64])
def test_sequence_splits_past_the_units_and_bitwise_repeatable(split_k, layout):
    """Splits cutting the one long image into units, and 64 splits of a 3-image batch (most write zeros)."""
    for layer in ("one-long-image-k31", "odd-c6-k17"):
        p = ConvProblem.build(**SEQUENCE_LAYERS[layer], dtype="bf16", layout=layout)
        inputs = make_inputs(p, "cuda")
        outcome = run_checked(p, family=FAMILY, device="cuda", inputs=inputs, split_k=split_k)
        assert_close_to_reference(outcome, p)
        assert_bitwise_repeatable(p, outcome.plan, *inputs)


def test_sequence_operands_with_other_strides_are_read_in_place():
    """A (N, L, C) activation transposed to (N, C, L), as Mamba's conv1d gets it, and a padded view."""
    p = ConvProblem.build(**SEQUENCE_LAYERS["conformer-k31"], dtype="bf16", layout="contiguous")
    x, dy = make_inputs(p, "cuda")
    transposed_x = x.transpose(1, 2).contiguous().transpose(1, 2)
    wide_dy = torch.randn(*dy.shape[:2], dy.shape[2] + 3, device="cuda").to(dy.dtype)[..., :dy.shape[2]]
    wide_dy.copy_(dy)
    chosen = convwgrad.plan(p, "cuda", family=FAMILY)
    for x_view, dy_view in ((transposed_x, dy), (x, wide_dy)):
        with convwgrad.record_launches() as log:
            out = dispatch_conv_grouped(p, x_view, dy_view, plan=chosen)
        assert [r.family for r in log] == [FAMILY]
        reference = reference_weight_grad(p, x_view.contiguous(), dy_view.contiguous())
        assert relative_error(out, reference) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("step", launcher.SEQUENCE_STEPS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("layer", ["conformer-k31", "one-long-image-k31", "k128-c12", "odd-c6-k17", "many-steps-c1024"])
def test_sequence_kernels_of_every_step_vs_reference(layer, layout, step):
    """Each built step length (the family runs SEQUENCE_STEP; the others are built to be timed) over
    NaN-poisoned dW and workspace."""
    p = ConvProblem.build(**SEQUENCE_LAYERS[layer], dtype="bf16", layout=layout)
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family=FAMILY, split_k=3)
    bound = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None, sequence_step=step)
    got = _poisoned_run(bound, p, chosen, x, dy)
    assert bound.kernels[0] == launcher.stage1_kernel_name(p, 4 if "_cl4" in bound.kernels[0] else 0, step)
    assert relative_error(got, reference_weight_grad(p, x, dy)) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_router_gives_it_1d_filters_and_a_patched_conv1d_uses_it(layout):
    p = ConvProblem.build(**SEQUENCE_LAYERS["conformer-k31"], dtype="bf16", layout=layout)
    assert convwgrad.plan(p, "cuda").family == FAMILY
    torch.manual_seed(0)
    stock = torch.nn.Conv1d(256, 256, 31, padding=15, groups=256, bias=False).cuda()
    patched = convwgrad.patch(torch.nn.Conv1d(256, 256, 31, padding=15, groups=256, bias=False).cuda())
    patched.load_state_dict(stock.state_dict())
    x = torch.randn(4, 256, 512, device="cuda")
    if layout == "channels_last":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = patched(x)
        dy = torch.randn_like(out)
        with convwgrad.record_launches() as log:
            out.backward(dy)
        stock(x).backward(dy)
    torch.cuda.synchronize()
    assert [r.family for r in log] == [FAMILY] and "_seq" in log[0].kernels[0], log
    reference = reference_weight_grad(p, x.bfloat16(), dy.bfloat16())
    assert relative_error(patched.weight.grad, reference) <= TOLERANCE["bf16"]
