"""``torch.ops.convwgrad.conv`` on one layer, compiled against eager: shared by the CPU and GPU
compile tests."""

import attrs
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.frameworks.torch_ops import planned_for_torch
from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
from convwgrad.provider.layout import TORCH_DTYPES
from convwgrad.provider.reference import TOLERANCE


@attrs.frozen
class Run:
    output: torch.Tensor
    grads: tuple  # (grad_input, dW, grad_bias or None)
    families: list


def _run(fn, x, w, b, dy) -> Run:
    """Forward and backward of ``fn(x, w, b)`` for the upstream gradient ``dy``, on fresh leaves."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    b = None if b is None else b.detach().requires_grad_()
    leaves = (x, w) if b is None else (x, w, b)
    with convwgrad.record_launches() as log:
        y = fn(x, w, b)
        grads = torch.autograd.grad(y, leaves, dy)
    if x.is_cuda:
        torch.cuda.synchronize()
    return Run(output=y.detach(), grads=(*grads, None) if b is None else grads, families=[r.family for r in log])


def _assert_close(what, got, want, tol):
    err = relative_error(got, want.double())
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"


def check_compiled_op(problem: ConvProblem, device, *, bias: bool, seed: int, other_grads_tol: float,
                      backend: str = "inductor") -> str:
    """Run ``problem``'s layer through ``torch.ops.convwgrad.conv`` eagerly and compiled with
    ``fullgraph=True`` on the same fresh random input, weight, bias and upstream gradient; assert

    - one dispatch eagerly, of the family ``plan()`` picks for the problem; compiled, the same
      dispatch, or none where plan() gives dW to torch (the compiled backward is then stock
      torch's ``convolution_backward``, with no op in the graph);
    - the compiled forward bitwise the compiled stock convolution's (inductor lowers the op's
      forward as ``aten.convolution``), and within ``other_grads_tol`` of the eager op's;
    - the same dW: bitwise for a convwgrad family (deterministic kernels on the same x and dy),
      within the dtype's tolerance for aten's (cuDNN may reduce in any order);
    - dW within the dtype's tolerance of float64;
    - grad_input (and grad_bias) within ``other_grads_tol`` of eager, and eager's within it of
      stock torch's convolution (aten's autograd).

    Return the family that ran."""
    g = torch.Generator().manual_seed(seed)
    x, dy = make_inputs(problem, device, g)
    dtype = TORCH_DTYPES[problem.dtype]
    w = torch.randn(problem.weight_size, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(problem.out_channels, generator=g).to(device=device, dtype=dtype) if bias else None
    padding = problem.symmetric_padding
    assert padding is not None, "the op takes symmetric padding"
    args = (list(problem.stride), list(padding), list(problem.dilation), problem.groups)

    def layer(x, w, b):
        return torch.ops.convwgrad.conv(x, w, b, *args)

    def stock_layer(x, w, b):
        stride, padding, dilation, groups = args
        return torch.ops.aten.convolution(x, w, b, stride, padding, dilation, False, [0] * len(stride), groups)

    torch._dynamo.reset()  # one compile per problem, none of an earlier test's guards
    compiled = torch.compile(layer, backend=backend, fullgraph=True, dynamic=False)
    compiled_stock = torch.compile(stock_layer, backend=backend, fullgraph=True, dynamic=False)
    family = convwgrad.plan(problem, x.device).family
    compiled_stock_backward = planned_for_torch(x, w, *args)  # default mode: no CUDA graphs, eager launches only
    stock, eager, comp = _run(stock_layer, x, w, b, dy), _run(layer, x, w, b, dy), _run(compiled, x, w, b, dy)
    comp_stock = _run(compiled_stock, x, w, b, dy)
    assert stock.families == [] and comp_stock.families == []
    assert eager.families == [family], (family, eager.families)
    assert comp.families == ([] if compiled_stock_backward else [family]), (family, compiled_stock_backward, comp.families)
    assert torch.equal(comp.output, comp_stock.output), (
        f"forward, compiled op vs compiled stock: {relative_error(comp.output, comp_stock.output.double()):.2e}")
    _assert_close("forward compiled vs eager", comp.output, eager.output, other_grads_tol)
    (dx_s, _, db_s), (dx_e, dw_e, db_e), (dx_c, dw_c, db_c) = stock.grads, eager.grads, comp.grads
    assert dw_c.dtype == dx_c.dtype == dtype
    tol = TOLERANCE[problem.dtype]
    if family == "aten":
        _assert_close("dW compiled vs eager", dw_c, dw_e, tol)
    else:
        assert torch.equal(dw_c, dw_e), f"dW compiled vs eager ({family}): {relative_error(dw_c, dw_e.double()):.2e}"
    _assert_close("dW vs float64", dw_c, reference_weight_grad(problem, x, dy, device=x.device), tol)
    _assert_close("grad_input compiled vs eager", dx_c, dx_e, other_grads_tol)
    _assert_close("grad_input eager vs stock", dx_e, dx_s, other_grads_tol)
    if bias:
        _assert_close("grad_bias compiled vs eager", db_c, db_e, other_grads_tol)
        _assert_close("grad_bias eager vs stock", db_e, db_s, other_grads_tol)
    return family
