"""The warm path on the GPU: after the first call of a signature the Triton kernels are launched
directly (KernelLaunch); every later call must compute the same function as a cold one, on fresh
data, on views whose pointers are not 16-byte aligned, and under CUDA graph capture."""

import pytest
import torch

import convwgrad
from convwgrad.provider.reference import reference_weight_grad, relative_error

pytestmark = pytest.mark.gpu

#: The Triton split-K layer's dtype. bf16 1-D depthwise filters of >= 15 taps are routed to the NVRTC
#: shifted-MMA family (routing.SHIFTED_MMA_SEQUENCE_FROM_TAPS, session 16), which binds no KernelLaunch;
#: fp16 was not measured there, so the same layer in fp16 stays on wgrad_merged's Triton kernels with split-K.
TRITON_SPLIT_DTYPE = torch.float16

#: (name, input shape, weight shape, padding, dtype, family): the NVRTC shifted-MMA family (channels_last from
#: 9x9, routing.SHIFTED_MMA_CHANNELS_LAST_FROM_TAPS), the Triton shifted family (output rows narrower than
#: routing.SHIFTED_MMA_MIN_OUTPUT_WIDTH) and a Triton split-K layer of wgrad_merged
LAYERS = [
    ("replk-13x13", (16, 128, 14, 14), (128, 1, 13, 13), 6, torch.bfloat16, "wgrad_shifted_mma"),
    ("replk-13x13-7x7-plane", (16, 128, 7, 7), (128, 1, 13, 13), 6, torch.bfloat16, "wgrad_shifted"),
    ("conformer-1d-k31", (8, 256, 200), (256, 1, 31), 15, TRITON_SPLIT_DTYPE, "wgrad_merged"),
]


def channels_last_view(buffer, offset, shape):
    """A channels_last (N, C, *spatial) view of ``buffer`` starting at element ``offset``: no copy,
    so an odd offset leaves its pointer off 16-byte alignment."""
    n, c, *spatial = shape
    numel = torch.Size(shape).numel()
    flat = buffer[offset:offset + numel].view(n, *spatial, c).normal_()
    return flat.movedim(-1, 1)


@pytest.mark.parametrize("name,shape,wshape,padding,dtype,family", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_repeated_calls_on_fresh_and_misaligned_data(name, shape, wshape, padding, dtype, family):
    nd_weight = {3: convwgrad.conv1d_weight, 4: convwgrad.conv2d_weight}[len(shape)]
    groups = shape[1]
    # a buffer one element longer, so a view starting at element 1 is 2-byte, not 16-byte, aligned
    x_buffer = torch.empty(torch.Size(shape).numel() + 1, device="cuda", dtype=dtype)
    dy_buffer = torch.empty_like(x_buffer)
    for step, offset in enumerate((0, 0, 0, 1, 0, 1)):
        x = channels_last_view(x_buffer, offset, shape)
        dy = channels_last_view(dy_buffer, offset, shape)
        assert (x.data_ptr() % 16 != 0) == bool(offset) and convwgrad.ConvProblem.from_tensors(
            x, wshape, dy, 1, padding, 1, groups).layout == "channels_last"
        with convwgrad.record_launches() as log:
            dw = nd_weight(x, wshape, dy, 1, padding, 1, groups)
        assert [r.family for r in log] == [family]
        problem = convwgrad.ConvProblem.from_tensors(x, wshape, dy, 1, padding, 1, groups)
        err = relative_error(dw, reference_weight_grad(problem, x, dy, device="cuda"))
        assert err < 8e-3, f"call {step} (offset {offset}): relative error {err:.2e}"


def test_graph_capture_of_a_warm_call_replays_on_new_data():
    x = torch.randn(16, 128, 14, 14, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    dy = torch.randn_like(x)
    convwgrad.conv2d_weight(x, (128, 1, 13, 13), dy, 1, 6, 1, 128)  # warm: the direct launch is armed
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        convwgrad.conv2d_weight(x, (128, 1, 13, 13), dy, 1, 6, 1, 128)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dw = convwgrad.conv2d_weight(x, (128, 1, 13, 13), dy, 1, 6, 1, 128)
    for _ in range(2):
        x.normal_(), dy.normal_()
        dw.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        problem = convwgrad.ConvProblem.from_tensors(x, (128, 1, 13, 13), dy, 1, 6, 1, 128)
        assert relative_error(dw, reference_weight_grad(problem, x, dy, device="cuda")) < 8e-3


def test_warm_aligned_calls_skip_the_jit(monkeypatch):
    """After its first call a signature's kernels are launched directly: JITFunction.run is not
    called again for aligned tensors (it is, once per call, for a misaligned view). Measured on the
    H200 with the shortcut not taken: ~100 us of host time per two-stage call."""
    from convwgrad.plugins.wgrad_merged.kernels import _wgrad_merged_kernel
    from convwgrad.provider.blocks import launch

    if not launch.direct_launch_supported():
        pytest.skip("this Triton release launches through the JIT on every call")
    jit_runs = []
    jit_run = _wgrad_merged_kernel.run
    monkeypatch.setattr(_wgrad_merged_kernel, "run", lambda *a, **k: jit_runs.append(1) or jit_run(*a, **k),
                        raising=False)
    x = torch.randn(8, 256, 200, device="cuda", dtype=TRITON_SPLIT_DTYPE).transpose(1, 2).contiguous().transpose(1, 2)
    dy = torch.randn_like(x)
    with convwgrad.record_launches() as log:
        for _ in range(5):
            convwgrad.conv1d_weight(x, (256, 1, 31), dy, 1, 15, 1, 256)
    assert [r.family for r in log] == ["wgrad_merged"] * 5
    assert len(jit_runs) <= 1, f"{len(jit_runs)} of 5 calls went through the JIT"


def _two_stage_layer(n=8, channels=256, width=200):
    """The 1-D k=31 layer planned for wgrad_merged with split-K: its fp32 partials use the workspace."""
    x = torch.randn(n, channels, width, device="cuda", dtype=TRITON_SPLIT_DTYPE).transpose(1, 2).contiguous().transpose(1, 2)
    dy = torch.randn_like(x)
    problem = convwgrad.ConvProblem.from_tensors(x, (channels, 1, 31), dy, 1, 15, 1, channels)
    return x, dy, problem


def _dw(x, dy, problem):
    return convwgrad.conv1d_weight(x, problem.weight_size, dy, 1, 15, 1, problem.groups)


def test_the_kept_workspace_is_one_per_stream_reused_poisoned_and_released():
    from convwgrad.provider import dispatch

    x, dy, problem = _two_stage_layer()
    if not convwgrad.plan(problem).workspace_nbytes:
        pytest.skip("the layer is planned with one stage here: no workspace to keep")
    convwgrad.release_workspaces()
    with convwgrad.record_launches() as log:
        _dw(x, dy, problem)
    assert [(r.family, len(r.kernels)) for r in log] == [(convwgrad.plan(problem).family, 2)], log
    kept = dict(dispatch._kept_here())
    assert len(kept) == 1, kept.keys()
    (key, buffer), = kept.items()
    for step in range(3):  # stale NaNs from "the last call" must never reach dW: stage 1 writes every partial
        torch.cuda.synchronize()
        buffer.view(torch.float32)[: buffer.numel() // 4].fill_(float("nan"))
        x.normal_(), dy.normal_()
        dw = _dw(x, dy, problem)
        assert dispatch._kept_here()[key] is buffer, "the kept workspace was not reused"
        err = relative_error(dw, reference_weight_grad(problem, x, dy, device="cuda"))
        assert err < 8e-3, f"call {step}: relative error {err:.2e}"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        side_dw = _dw(x, dy, problem)
    torch.cuda.current_stream().wait_stream(side)
    assert len(dispatch._kept_here()) == 2, "a second stream must keep its own workspace"
    assert torch.equal(side_dw, _dw(x, dy, problem)), "the same call on another stream differs"
    convwgrad.release_workspaces()
    assert not dispatch._kept_here()


def test_a_capture_allocates_its_own_workspace():
    from convwgrad.provider import dispatch

    x, dy, problem = _two_stage_layer()
    if not convwgrad.plan(problem).workspace_nbytes:
        pytest.skip("the layer is planned with one stage here: no workspace to keep")
    _dw(x, dy, problem)  # warm, outside capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    convwgrad.release_workspaces()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        dw = _dw(x, dy, problem)
    assert not dispatch._kept_here(), "a captured call kept a workspace the graph does not own"
    for _ in range(2):
        x.normal_(), dy.normal_()
        _dw(x, dy, problem)  # an eager call between replays, with its own (kept) workspace
        graph.replay()
        torch.cuda.synchronize()
        assert relative_error(dw, reference_weight_grad(problem, x, dy, device="cuda")) < 8e-3


def test_threads_on_one_stream_never_share_partials():
    """Two host threads launching two-stage calls onto the same (default) stream: each thread's
    stage 1 / stage 2 pairs may interleave with the other's, so each must own its workspace."""
    import threading

    layers = [_two_stage_layer(n=n, width=w) for n, w in ((8, 200), (4, 333), (6, 257))]
    expected = [reference_weight_grad(p, x, dy, device="cuda") for x, dy, p in layers]
    errors = []

    def work(index):
        x, dy, problem = layers[index % len(layers)]
        for _ in range(30):
            err = relative_error(_dw(x, dy, problem), expected[index % len(layers)])
            if not err < 8e-3:
                errors.append((index, err))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_warm_launches_take_the_c_launcher_and_still_call_live_hooks():
    """On the Triton release whose launcher was read (C_LAUNCH_TRITON), an armed KernelLaunch calls
    the compiled C launch; a profiler's enter hook is still called once per launch."""
    import gc

    from convwgrad.provider.blocks import launch

    knobs = pytest.importorskip("triton.knobs")
    x, dy, problem = _two_stage_layer()
    _dw(x, dy, problem)
    armed = [k for k in gc.get_objects() if isinstance(k, launch.KernelLaunch) and k.compiled is not None]
    assert armed, "no KernelLaunch was armed by a warm call"
    if launch._triton_release() in launch.C_LAUNCH_TRITON:
        assert all(k.c_launch is not None for k in armed), [k.kernel.__name__ for k in armed if k.c_launch is None]
    seen = []
    previous = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = seen.append
    try:
        with convwgrad.record_launches() as log:
            dw = _dw(x, dy, problem)
    finally:
        knobs.runtime.launch_enter_hook = previous
    assert len(seen) == len(log[-1].kernels), (len(seen), log[-1].kernels)
    assert relative_error(dw, reference_weight_grad(problem, x, dy, device="cuda")) < 8e-3
