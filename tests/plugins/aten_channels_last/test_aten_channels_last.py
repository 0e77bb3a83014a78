"""The aten channels_last family: NCHW operands copied to channels_last, then torch's dW.

The family runs on CUDA only (it exists for cuDNN; on the CPU oneDNN's channels_last path has
bugs its NCHW path has not). Its computation, the copies and aten's call (``relayout_call``), is
checked on every device against float64, aten asserted to have received channels_last operands;
the dispatch path (NaN-poisoned dW, the family asserted to have run, a patched model) where the
family runs; refusals with their reasons everywhere; routing where measured."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.plugins import aten_channels_last
from convwgrad.provider import PROFILES, ConvProblem
from convwgrad.provider.plan import NoCandidateError
from convwgrad.provider.reference import TOLERANCE, reference_weight_grad, relative_error
from support import DEVICE, assert_close_to_reference, run_checked

FAMILY = aten_channels_last.FAMILY
#: the dispatch path: the family refuses every backend but CUDA, so these run in the GPU suite
ON_CUDA = pytest.mark.gpu
#: torch's CPU convolutions compute fp32 and bf16 (fp16 only on the GPU suite's device)
DTYPES = ["fp32", "bf16"] + (["fp16"] if DEVICE == "cuda" else [])

PROBLEMS = {
    "depthwise-3x3": dict(batch=2, groups=16, in_channels=16, input_size=(9, 9), filter_size=3, padding=1),
    "depthwise-odd-s2-d2-asym": dict(batch=3, groups=5, in_channels=5, input_size=(11, 7), filter_size=3, stride=2,
                                     dilation=2, padding=((1, 3), (2, 2))),
    "depthwise-7x7-prime": dict(batch=1, groups=13, in_channels=13, input_size=(13, 17), filter_size=7, padding=3),
    "multiplier-kpg3": dict(batch=2, groups=6, in_channels=6, out_channels=18, input_size=(8, 8), filter_size=5,
                            padding=2),
    "grouped-cpg4": dict(batch=2, groups=4, in_channels=16, input_size=(7, 7), filter_size=3, padding=1),
    "depthwise-3d": dict(batch=2, groups=8, in_channels=8, input_size=(4, 6, 5), filter_size=3, padding=1),
    "conformer-1d-s2-d2": dict(batch=2, groups=12, in_channels=12, input_size=(37,), filter_size=7, stride=2,
                               dilation=2, padding=6),
    "mamba-1d-causal": dict(batch=3, groups=8, in_channels=8, input_size=(19,), filter_size=4, padding=((3, 0),)),
    "multiplier-1d-kpg2": dict(batch=2, groups=4, in_channels=4, out_channels=8, input_size=(11,), filter_size=5,
                               padding=2),
}


class _ConvolutionBackwardLayouts(TorchDispatchMode):
    """Records, for every aten.convolution_backward below float64, whether its input was channels_last."""

    def __init__(self):
        super().__init__()
        self.channels_last = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution_backward.default:
            x = args[1]  # 4-D for 1-D and 2-D problems (a 1-D one runs as height 1), 5-D for 3-D
            fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
            if x.dtype != torch.float64:  # not the float64 reference run_checked computes
                self.channels_last.append(x.is_contiguous(memory_format=fmt) and not x.is_contiguous())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_relayout_call_matches_float64_through_channels_last_copies(name, dtype, no_tf32):
    problem = ConvProblem.build(**PROBLEMS[name], dtype=dtype, layout="contiguous")
    x, dy = make_inputs(problem, DEVICE)
    assert x.is_contiguous() and dy.is_contiguous()
    with _ConvolutionBackwardLayouts() as seen:
        dw = aten_channels_last.relayout_call(problem)(x, dy)
    assert seen.channels_last == [True], "aten did not receive channels_last operands once"
    assert dw.shape == problem.weight_size and dw.dtype == x.dtype
    error = relative_error(dw, reference_weight_grad(problem, x, dy))
    assert error <= TOLERANCE[problem.dtype], f"{problem.describe()}: relative error {error:.3e}"
    assert x.is_contiguous() and dy.is_contiguous()  # the caller's tensors are left as they were


@ON_CUDA
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_dispatch_runs_the_family_into_every_element(name, no_tf32):
    problem = ConvProblem.build(**PROBLEMS[name], dtype="bf16", layout="contiguous")
    outcome = run_checked(problem, family=FAMILY)
    assert tuple(outcome.launches[0].kernels) == aten_channels_last.KERNELS
    assert_close_to_reference(outcome, problem)


@ON_CUDA
def test_a_fresh_dw_is_contiguous_and_repeats_bitwise(no_tf32):
    problem = ConvProblem.build(**PROBLEMS["multiplier-kpg3"], dtype="fp32", layout="contiguous")
    x, dy = make_inputs(problem, DEVICE)
    chosen = convwgrad.plan(problem, DEVICE, family=FAMILY)
    first = convwgrad.dispatch_conv_grouped(problem, x, dy, plan=chosen)
    second = convwgrad.dispatch_conv_grouped(problem, x, dy, plan=chosen)
    assert first.is_contiguous() and first.shape == problem.weight_size
    assert torch.equal(first, second)


@pytest.mark.parametrize("fields, target, reason", [
    (dict(layout="channels_last"), "sm_90", "layout=channels_last: the operands are not NCHW"),
    (dict(), "cpu", "backend=interpreter: the copies exist to reach cuDNN"),  # a CPU device plans for the interpreter
    (dict(), "gfx950", "backend=hip: the copies exist to reach cuDNN"),
    (dict(dtype="fp16", dilation=2, padding=2), "sm_90", "dtype=fp16 with dilation or asymmetric padding"),
    (dict(dtype="fp16", padding=((1, 0), (1, 1))), "sm_90", "dtype=fp16 with dilation or asymmetric padding"),
])
def test_refusals_name_the_reason(fields, target, reason):
    base = dict(batch=2, groups=8, in_channels=8, input_size=(9, 9), filter_size=3, padding=1, layout="contiguous")
    problem = ConvProblem.build(**{**base, **fields})
    with pytest.raises(NoCandidateError, match=reason):
        convwgrad.plan(problem, target, family=FAMILY)
    with pytest.raises(NoCandidateError, match="split_k=2: aten computes dW in one call"):
        convwgrad.plan(ConvProblem.build(**base), "sm_90", family=FAMILY, split_k=2)


def test_opt_in_it_is_routed_only_in_its_measured_class():
    """bf16 NCHW 3x3 (1.17x torch's path on the largest layer measured) is admitted, not routed."""
    problem = ConvProblem.build(batch=32, groups=96, in_channels=96, input_size=(56, 56), filter_size=3, padding=1,
                                dtype="bf16", layout="contiguous")
    chosen = convwgrad.plan(problem, PROFILES["sm_90"])
    assert chosen.family != FAMILY
    text = str(convwgrad.explain(problem, PROFILES["sm_90"]))
    assert f"{FAMILY}_bf16_spk1_1stage: admitted" in text


@ON_CUDA
def test_a_patched_nchw_model_routed_to_the_family_trains_like_stock(no_tf32):
    """The whole path a model run with tools/route_experiments.py:nchw_to_channels_last takes: a
    selector plugin routes the NCHW grouped layers to this family, the patched backward runs it
    (its operands as autograd hands them over), and every gradient matches the stock model's."""
    import copy

    import torch.nn.functional as F
    from torch import nn

    from convwgrad.provider.hookspecs import hookimpl
    from convwgrad.provider.manager import build_plugin_manager, use_plugin_manager
    from convwgrad.provider.registry import Choice

    class RouteToFamily:
        @hookimpl(tryfirst=True)
        def convwgrad_select(self, problem, target, candidates, families):
            return next((Choice(spec=s, rule="test: routed to aten_channels_last") for s, ok in candidates
                         if ok and s.family == FAMILY), None)

    torch.manual_seed(0)
    stock = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(),
                          nn.Conv2d(8, 16, 5, stride=2, padding=2, groups=8, bias=False), nn.Flatten(),
                          nn.LazyLinear(4)).to(DEVICE)
    x = torch.randn(3, 8, 9, 9, device=DEVICE)
    target = torch.randint(0, 4, (3,), device=DEVICE)
    stock(x)  # materialise the lazy layer before copying
    patched = convwgrad.patch(copy.deepcopy(stock))
    pm = build_plugin_manager(load_entrypoints=False)
    pm.register(RouteToFamily())
    F.cross_entropy(stock(x), target).backward()
    with use_plugin_manager(pm), convwgrad.record_launches() as log:
        assert [p.family for _, p in convwgrad.layer_plans(patched, x)] == [FAMILY, FAMILY]
        F.cross_entropy(patched(x), target).backward()
    assert [r.family for r in log] == [FAMILY, FAMILY]
    for (name, a), (_, b) in zip(stock.named_parameters(), patched.named_parameters()):
        assert relative_error(b.grad, a.grad.double()) <= 1e-5, name
