"""The public API against torch.nn.grad on the CPU (Triton interpreter)."""

import pytest
import torch

import convwgrad
from convwgrad.bench import to_channels_last
from support import DEVICE

TORCH_GRAD = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}
OURS = {1: convwgrad.conv1d_weight, 2: convwgrad.conv2d_weight, 3: convwgrad.conv3d_weight}
CONV = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_same_as_torch_nn_grad(rank, dtype, channels_last, no_tf32):
    spatial = (11, 7, 6)[-rank:] if rank > 1 else (23,)
    groups, cpg, kpg = 3, 2, 2
    x = torch.randn(2, groups * cpg, *spatial, dtype=dtype, device=DEVICE)
    w = torch.randn(groups * kpg, cpg, *(3,) * rank, dtype=dtype, device=DEVICE)
    dy = torch.randn_like(CONV[rank](x.float(), w.float(), stride=2, padding=1, groups=groups).to(dtype))
    if channels_last:
        x, dy = to_channels_last(x), to_channels_last(dy)
    with convwgrad.record_launches() as log:
        ours = OURS[rank](x, w.shape, dy, stride=2, padding=1, groups=groups)
    assert [r.family for r in log] == ["wgrad_splitk"]
    assert ours.dtype == dtype and ours.shape == w.shape
    ref = TORCH_GRAD[rank](x.cpu().double(), w.shape, dy.cpu().double(), stride=2, padding=1, groups=groups)
    err = ((ours.cpu().double() - ref).norm() / ref.norm()).item()
    assert err < (1e-5 if dtype == torch.float32 else 1e-3)


def test_wrong_rank_names_function():
    x = torch.randn(2, 4, 8, 8)
    with pytest.raises(ValueError, match="conv3d_weight needs a 5-D input"):
        convwgrad.conv3d_weight(x, (4, 1, 3, 3), x, padding=1, groups=4)


def test_out_argument_and_bad_out():
    p = convwgrad.ConvProblem.build(batch=2, groups=4, in_channels=4, input_size=(6, 6), filter_size=3,
                                    padding=1, dtype="fp32")
    x, dy = torch.randn(p.input_shape, device=DEVICE), torch.randn(p.grad_output_shape, device=DEVICE)
    out = torch.full(p.weight_size, float("nan"), device=DEVICE)
    assert convwgrad.dispatch_conv_grouped(p, x, dy, out=out) is out and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="out has shape"):
        convwgrad.dispatch_conv_grouped(p, x, dy, out=torch.empty(4, 1, 3, 2, device=DEVICE))
    with pytest.raises(ValueError, match="out has dtype"):
        convwgrad.dispatch_conv_grouped(p, x, dy, out=torch.empty(p.weight_size, dtype=torch.float16, device=DEVICE))
    with pytest.raises(ValueError, match="grad_output has shape"):
        convwgrad.dispatch_conv_grouped(p, x, dy[:, :, 1:])
    with pytest.raises(ValueError, match="workspace must be"):
        plan = convwgrad.plan(p, DEVICE, split_k=2, tile=convwgrad.Tile(block_m=16, block_n=16, block_k=16))
        convwgrad.dispatch_conv_grouped(p, x, dy, plan=plan, workspace=torch.empty(4, dtype=torch.uint8, device=DEVICE))


def test_cpu_tensors_without_interpreter_run_aten(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(2, 4, 6, 6)
    dy = torch.randn(2, 4, 6, 6)
    with convwgrad.record_launches() as log:
        ours = convwgrad.conv2d_weight(x, (4, 1, 3, 3), dy, padding=1, groups=4)
    assert [r.family for r in log] == ["aten"]
    ref = torch.nn.grad.conv2d_weight(x, (4, 1, 3, 3), dy, padding=1, groups=4)
    torch.testing.assert_close(ours, ref)


def test_bad_call_raises_every_time_despite_the_problem_cache():
    x = torch.randn(2, 6, 5, 5, device=DEVICE)
    dy = torch.randn(2, 6, 5, 5, device=DEVICE)
    for _ in range(2):
        with pytest.raises(ValueError, match="input has 6 channels and groups=4"):
            convwgrad.conv2d_weight(x, (4, 1, 3, 3), dy, padding=1, groups=4)
    good = convwgrad.conv2d_weight(x, (6, 1, 3, 3), dy, padding=[1, 1], groups=6)
    again = convwgrad.conv2d_weight(x, (6, 1, 3, 3), dy, padding=[1, 1], groups=6)
    assert torch.equal(good, again)


def test_launches_are_recorded_from_other_threads():
    """A CUDA backward runs on autograd's worker thread: its launches must reach the caller's log."""
    import threading

    x = torch.randn(2, 8, 5, 5, device=DEVICE)
    dy = torch.randn(2, 8, 5, 5, device=DEVICE)
    with convwgrad.record_launches() as log:
        worker = threading.Thread(target=convwgrad.conv2d_weight, args=(x, (8, 1, 3, 3), dy, 1, 1, 1, 8))
        worker.start()
        worker.join()
    assert len(log) == 1 and log[0].family in ("wgrad_merged", "wgrad_splitk", "aten")
    convwgrad.conv2d_weight(x, (8, 1, 3, 3), dy, 1, 1, 1, 8)
    assert len(log) == 1  # closed: later launches are not recorded
