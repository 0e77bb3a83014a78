"""The routed layer's native backward (``provider/native``: a C++ autograd function) on any machine:
a patched layer routed to a convwgrad family runs it, gives stock's gradients for what it is asked
(dX, dW, the bias), keeps autograd's contracts (saved-tensor hooks, version checks, errors of its
Python fallback), and leaves to Python what Python must see (logs, modes, subclasses, the switch).
On a CPU every backward takes the fallback (no driver); the launches themselves are the GPU tests'."""

import copy

import pytest
import torch
from torch import nn

import convwgrad
from convwgrad.frameworks import torch_ops
from convwgrad.provider import native
from convwgrad.provider.blocks import launch, nvrtc
from convwgrad.provider.spec import LaunchOperand
from support import DEVICE

FP32_TOL = 1e-5


@pytest.fixture(autouse=True)
def native_backward_on(monkeypatch):
    """The native backward is opt-in (``CONVWGRAD_NATIVE_BACKWARD=1``); these tests are about it."""
    monkeypatch.setattr(torch_ops, "native_backward", True)


@pytest.fixture(scope="module", autouse=True)
def loaded():
    assert native.load() is not None, f"the native extension did not load: {native.status()}"


@pytest.fixture(autouse=True)
def routed_on_every_device(pinned):
    """On a CPU the router gives these small layers to a Triton family (the interpreter); on a GPU it
    gives them to cuDNN, so there every layer is pinned to the general split-K family, routed alike."""
    if DEVICE == "cuda":
        pinned("wgrad_splitk")


def relative(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def pair(conv_class=nn.Conv2d, channels=8, k=3, multiplier=1, bias=True, **kwargs):
    """(stock, patched) copies of one grouped layer on the test device ('same' padding unless given)."""
    kwargs.setdefault("padding", k // 2)
    torch.manual_seed(0)
    stock = conv_class(channels, channels * multiplier, k, groups=channels, bias=bias, **kwargs).to(DEVICE)
    return stock, convwgrad.patch(copy.deepcopy(stock))


def inputs(rank, channels=8, size=9, batch=2, channels_last=False):
    x = torch.randn(batch, channels, *(size,) * rank, device=DEVICE)
    if channels_last:
        x = x.movedim(1, -1).contiguous().movedim(-1, 1)
    return x


def backward_counts():
    native_count, fallback_count, _ = native.backward_stats()
    return native_count, fallback_count


LAYERS = {  # name: (conv class, layer kwargs, input rank, input kwargs)
    "2d": (nn.Conv2d, dict(padding=1), 2, {}),
    "2d-channels-last": (nn.Conv2d, dict(padding=1), 2, dict(channels_last=True)),
    "2d-stride-dilation-no-bias": (nn.Conv2d, dict(stride=2, padding=2, dilation=2, bias=False), 2, dict(size=11)),
    "2d-multiplier": (nn.Conv2d, dict(padding=1, multiplier=2), 2, {}),
    "1d-k5": (nn.Conv1d, dict(k=5, padding=2), 1, dict(size=13)),
    "3d": (nn.Conv3d, dict(padding=1), 3, dict(size=5)),
}


@pytest.mark.parametrize("name", LAYERS)
def test_a_routed_layer_runs_the_native_function_and_gives_stocks_gradients(name):
    conv_class, layer_kwargs, rank, input_kwargs = LAYERS[name]
    stock, patched = pair(conv_class, **layer_kwargs)
    for step in range(3):  # the first backward installs (on a GPU), later ones launch
        x = inputs(rank, **input_kwargs)
        xs, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
        ys, yp = stock(xs), patched(xp)
        assert type(yp.grad_fn).__name__ == "CppFunction", f"step {step}: {yp.grad_fn}"
        assert torch.equal(ys, yp)
        g = torch.randn_like(ys)
        before = sum(backward_counts())
        ys.backward(g)
        yp.backward(g)
        assert sum(backward_counts()) == before + 1  # one routed backward, native or fallback
        assert relative(patched.weight.grad, stock.weight.grad) <= FP32_TOL
        assert relative(xp.grad, xs.grad) <= FP32_TOL
        if stock.bias is not None:
            assert relative(patched.bias.grad, stock.bias.grad) <= FP32_TOL
        for module in (stock, patched):
            module.zero_grad(set_to_none=True)


def test_only_the_gradients_asked_for_are_computed():
    """An input without requires_grad gets none; a frozen bias none; dW still."""
    stock, patched = pair()
    patched.bias.requires_grad_(False)
    stock.bias.requires_grad_(False)
    x = inputs(2)
    g = torch.randn(2, 8, 9, 9, device=DEVICE)
    stock(x).backward(g)
    y = patched(x)
    assert type(y.grad_fn).__name__ == "CppFunction"
    y.backward(g)
    assert x.grad is None and patched.bias.grad is None
    assert relative(patched.weight.grad, stock.weight.grad) <= FP32_TOL
    (dx,) = torch.autograd.grad(patched(x.requires_grad_()), x, g)  # dX alone: dW not computed
    assert relative(dx, torch.autograd.grad(stock(x), x, g)[0]) <= FP32_TOL


def test_saved_tensor_hooks_and_activation_checkpointing_see_its_saved_tensors():
    stock, patched = pair()
    x = inputs(2)
    g = torch.randn(2, 8, 9, 9, device=DEVICE)
    stock(x).backward(g)
    packed = []

    def pack(tensor):
        packed.append(tensor.shape)
        return tensor.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        patched(x).backward(g)
    assert packed == [x.shape, patched.weight.shape], packed
    assert relative(patched.weight.grad, stock.weight.grad) <= FP32_TOL
    patched.zero_grad(set_to_none=True)
    torch.utils.checkpoint.checkpoint(patched, x, use_reentrant=False).backward(g)
    assert relative(patched.weight.grad, stock.weight.grad) <= FP32_TOL


def test_an_input_modified_in_place_after_the_forward_is_refused_as_autograd_refuses_it():
    _, patched = pair()
    x = inputs(2).requires_grad_()
    h = x * 1
    y = patched(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_an_error_in_the_python_fallback_reaches_the_caller_as_itself(monkeypatch):
    _, patched = pair()

    def broken(*arguments):
        raise ValueError("a fallback that fails")

    monkeypatch.setattr(torch_ops, "_remembered_weight_grad", broken)
    y = patched(inputs(2))
    with pytest.raises(ValueError, match="a fallback that fails"):
        y.sum().backward()


def test_an_open_log_records_the_family_that_computed_dw():
    _, patched = pair()
    patched(inputs(2)).sum().backward()  # warm: on a GPU the next backward would launch natively
    with convwgrad.record_launches() as log:
        patched(inputs(2)).sum().backward()
    assert [r.family for r in log] == [convwgrad.layer_plans(patched, inputs(2))[0][1].family]


class Marked(torch.Tensor):
    pass


def test_python_keeps_what_it_must_see_subclasses_modes_and_the_switch(monkeypatch):
    stock, patched = pair()
    x = inputs(2)
    assert type(patched(x.as_subclass(Marked)).grad_fn).__name__ == "EagerConvBackward"

    class Seen(torch.overrides.TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Seen.calls += 1
            return func(*args, **(kwargs or {}))

    with Seen():
        assert type(patched(x).grad_fn).__name__ == "EagerConvBackward"
    assert Seen.calls > 0
    monkeypatch.setattr(torch_ops, "native_backward", False)
    y = patched(x)
    assert type(y.grad_fn).__name__ == "EagerConvBackward"
    g = torch.randn_like(y)
    y.backward(g)
    stock(x).backward(g)
    assert relative(patched.weight.grad, stock.weight.grad) <= FP32_TOL


def test_a_copied_model_starts_with_a_memo_of_its_own():
    _, patched = pair()
    patched(inputs(2)).sum().backward()
    memo = patched.__dict__["_convwgrad_route"][-1]
    assert memo.native  # the capsule, made on the first call
    copied = copy.deepcopy(patched)
    copied_memo = copied.__dict__["_convwgrad_route"][-1]
    assert copied_memo is not memo and copied_memo.native is None and not copied_memo
    y = copied(inputs(2))
    assert type(y.grad_fn).__name__ == "CppFunction"


def test_install_refuses_what_it_cannot_launch():
    memo = native.new_memo(0)
    x, w = torch.randn(2, 4, 5, 5), torch.randn(4, 1, 3, 3)
    launch_tuple = (1, (1, 1, 1), (32, 1, 1), 0, 16, 16, ((1, 8, 0),))
    assert not native.install(memo, x, x, w, ((launch_tuple,),), 0)  # a CPU input: never native
    if torch.cuda.is_available():
        xc, wc = x.cuda(), w.cuda()
        with pytest.raises(TypeError, match="malformed"):
            native.install(memo, xc, xc, wc, ((("not", "a", "launch"),),), 0)
        with pytest.raises(TypeError, match="malformed"):  # a 4-byte pointer
            native.install(memo, xc, xc, wc, (((1, (1, 1, 1), (32, 1, 1), 0, 16, 16, ((1, 4, 0),)),),), 0)


SCALED_COPY_PTX_PARAMS = r"""
import json
import triton
import triton.language as tl
from convwgrad.provider.aot import Constexpr, triton_compile
from convwgrad.provider.blocks import launch
from convwgrad.provider.target import resolve_target


@triton.jit
def scaled_copy(X, OUT, n, big, one, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(OUT + offsets, tl.load(X + offsets, mask=mask) * (big + one), mask=mask)


args = [("X", "*fp32"), ("OUT", "*fp32"), ("n", 100), ("big", 2**40), ("one", 1), ("BLOCK", Constexpr(64))]
compiled = triton_compile(scaled_copy, args, target=resolve_target("sm_90"), num_warps=1, num_stages=1,
                          name="scaled_copy")
print(json.dumps(launch.ptx_entry_param_bytes(compiled.asm["ptx"])))
"""


def test_a_triton_kernels_native_params_follow_its_signature_and_its_ptx(tmp_path):
    """What the launcher passes (non-constexpr arguments in order, ints compiled in as constexprs
    skipped, then scratch pointers) checked against the PTX entry's own parameters. The kernel is
    compiled in a child Python without TRITON_INTERPRET: an interpreted kernel leaves Triton's
    language patched for the compiler in this process (as ``aot.compile`` does for the same reason)."""
    import json
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    child = tmp_path / "scaled_copy_ptx_params.py"  # a file: Triton's JIT reads a kernel's source from it
    child.write_text(SCALED_COPY_PTX_PARAMS)
    done = subprocess.run([sys.executable, str(child)], capture_output=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    ptx_bytes = json.loads(done.stdout.decode().strip().splitlines()[-1])
    signature = ("*fp32", "*fp32", "i32", "i64", "constexpr", "constexpr")  # as the JIT types these values
    leading = (LaunchOperand.INPUT, LaunchOperand.OUT)
    params = launch.triton_native_params(signature, leading, (100, 2**40, 1, 64), ptx_bytes)
    assert params is not None, ptx_bytes
    assert params[:4] == ((1, 8, 0), (4, 8, 0), (0, 4, 100), (0, 8, 2**40))
    assert 1 <= len(params) - 4 <= 2 and all(p == (0, 8, 0) for p in params[4:])  # the scratch pointers
    assert [nbytes for _, nbytes, _ in params] == ptx_bytes
    # a float argument, or a PTX that disagrees, has no native launch
    assert launch.triton_native_params(("*fp32", "*fp32", "fp32", "i64", "constexpr", "constexpr"), leading,
                                       (1.5, 2**40, 1, 64), ptx_bytes) is None
    assert launch.triton_native_params(signature, leading, (100, 2**40, 1, 64), ptx_bytes[:-1] + [4]) is None


def test_packed_arguments_describe_their_native_launch():
    import ctypes

    types = (ctypes.c_void_p,) * 3 + (ctypes.c_int, ctypes.c_longlong)
    packed = nvrtc.PackedArguments(types, (-3, 2**40))
    described = packed.native_launch(0x1234, (4, 2, 1), (128, 1, 1), 8, 1)
    assert described == (0x1234, (4, 2, 1), (128, 1, 1), 0, 8, 1,
                         ((1, 8, 0), (2, 8, 0), (3, 8, 0), (0, 4, -3), (0, 8, 2**40)))
