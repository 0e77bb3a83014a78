"""The dispatcher's warm path (prepared calls) and the call-level defects found by fuzzing:
each prepared call must answer exactly what a cold call answers, and be dropped whenever
anything plan() reads changes."""

import threading
import types

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, build_plugin_manager, use_plugin_manager
from convwgrad.provider.dispatch import _prepared, clear_prepared_calls, dispatch_conv_grouped, torch_weight_grad
from convwgrad.provider.plan import clear_plan_cache
from convwgrad.provider.reference import relative_error
from support import DEVICE


def depthwise(channels=16, size=6, dtype=torch.float32, batch=2):
    x = torch.randn(batch, channels, size, size, dtype=dtype, device=DEVICE)
    dy = torch.randn(batch, channels, size, size, dtype=dtype, device=DEVICE)
    return x, (channels, 1, 3, 3), dy


def torch_dw(x, ws, dy, **kw):
    return torch.nn.grad.conv2d_weight(x.double(), ws, dy.double(), **kw)


def test_a_repeat_is_prepared_once_and_computes_on_fresh_data(no_tf32):
    x, ws, dy = depthwise()
    clear_prepared_calls()
    first = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    entries = len(_prepared._calls)
    for _ in range(3):  # same signature, new values: one entry, right answers
        x.normal_(), dy.normal_()
        with convwgrad.record_launches() as log:
            dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
        assert len(_prepared._calls) == entries and [r.family for r in log] == ["wgrad_merged"]
        assert relative_error(dw, torch_dw(x, ws, dy, padding=1, groups=16)) < 1e-5
    assert not torch.equal(first, dw)


def test_strides_are_part_of_the_signature(no_tf32):
    x, ws, dy = depthwise()
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    xl, dyl = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
    dw = convwgrad.conv2d_weight(xl, ws, dyl, padding=1, groups=16)
    assert relative_error(dw, torch_dw(x, ws, dy, padding=1, groups=16)) < 1e-5
    sliced_x = torch.randn(2, 32, 6, 6, device=DEVICE)[:, ::2]  # channel stride 2
    dw = convwgrad.conv2d_weight(sliced_x, ws, dy, padding=1, groups=16)
    assert relative_error(dw, torch_dw(sliced_x, ws, dy, padding=1, groups=16)) < 1e-5


def test_validation_does_not_depend_on_call_order():
    x, ws, dy = depthwise(size=8)
    dy2 = torch.randn(2, 16, 4, 4, device=DEVICE)
    convwgrad.conv2d_weight(x, ws, dy2, stride=2, padding=1, groups=16)  # an int stride, kept
    for bad in (2.0, True, None, "2"):
        with pytest.raises((TypeError, ValueError), match="stride"):
            convwgrad.conv2d_weight(x, ws, dy2, stride=bad, padding=1, groups=16)
    with pytest.raises((TypeError, ValueError), match="padding"):
        convwgrad.conv2d_weight(x, ws, dy, padding=1.0, groups=16)


def test_a_plugin_change_reaches_prepared_calls(monkeypatch):
    x, ws, dy = depthwise()
    with convwgrad.record_launches() as log:
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    assert log[-1].family == "wgrad_merged"
    monkeypatch.setenv("CONVWGRAD_DISABLE_PLUGINS", "convwgrad.plugins.wgrad_merged")
    with use_plugin_manager(build_plugin_manager(load_entrypoints=False)), convwgrad.record_launches() as log:
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    assert log[-1].family == "wgrad_splitk"
    with convwgrad.record_launches() as log:
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    assert log[-1].family == "wgrad_merged"


def test_clearing_the_plan_cache_clears_prepared_calls():
    x, ws, dy = depthwise()
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    clear_plan_cache()
    assert _prepared.get(("no such key",)) is None and _prepared._calls == {}


def test_nested_and_concurrent_recorders_each_get_their_launches():
    x, ws, dy = depthwise()
    with convwgrad.record_launches() as outer:
        with convwgrad.record_launches() as inner:
            convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    assert len(inner) == 1 and len(outer) == 2
    logs, errors = {}, []

    def worker(i):
        try:
            with convwgrad.record_launches() as log:
                convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
            logs[i] = log
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(len(log) >= 1 for log in logs.values()) and len(logs) == 8


def test_interpreted_launches_from_many_threads_are_all_right(no_tf32):
    x, ws, dy = depthwise()
    expected = torch_dw(x, ws, dy, padding=1, groups=16)
    results, errors = [], []

    def worker():
        try:
            results.append(convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 8 and all(relative_error(r, expected) < 1e-5 for r in results)


def test_out_with_overlapping_memory_is_refused():
    p = convwgrad.ConvProblem.build(batch=2, groups=4, in_channels=4, input_size=(6, 6), filter_size=3,
                                    padding=1, dtype="fp32")
    x, dy = torch.randn(p.input_shape, device=DEVICE), torch.randn(p.grad_output_shape, device=DEVICE)
    with pytest.raises(ValueError, match="out has overlapping memory"):
        convwgrad.dispatch_conv_grouped(p, x, dy, out=torch.zeros(1, device=DEVICE).expand(4, 1, 3, 3))
    strided = torch.full((4, 1, 3, 6), float("nan"), device=DEVICE)[..., ::2]  # gaps, no overlap: fine
    assert convwgrad.dispatch_conv_grouped(p, x, dy, out=strided) is strided and torch.isfinite(strided).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_batch_gives_zeros_like_torch(dtype):
    x, ws, dy = depthwise(batch=0, dtype=dtype)
    dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    assert dw.shape == ws and dw.dtype == dtype and not dw.any()


def test_float64_is_computed_by_torch():
    x, ws, _ = depthwise(dtype=torch.float64)
    dy = torch.randn(2, 16, 5, 7, dtype=torch.float64, device=DEVICE)  # H padded (1, 0), W (1, 2)
    with convwgrad.record_launches() as log:
        dw = convwgrad.conv2d_weight(x, ws, dy, padding=((1, 0), (1, 2)), groups=16)
    assert [r.family for r in log] == ["aten"] and dw.dtype == torch.float64
    padded = torch.nn.functional.pad(x, (1, 2, 1, 0))
    assert relative_error(dw, torch_dw(padded, ws, dy, groups=16)) < 1e-12


@pytest.mark.parametrize("route", ["float64", "requires_grad"])
def test_torch_routes_return_a_contiguous_dw_for_a_grouped_channels_last_input(route):
    """torch's dW of a grouped channels_last input (cpg > 1) comes back channels_last; conv2d_weight
    promises contiguous on every route (fuzzing found these two returning torch's strides)."""
    dtype = torch.float64 if route == "float64" else torch.float32
    x = torch.randn(2, 8, 6, 6, dtype=dtype, device=DEVICE).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(2, 8, 6, 6, dtype=dtype, device=DEVICE).contiguous(memory_format=torch.channels_last)
    x.requires_grad_(route == "requires_grad")
    dw = convwgrad.conv2d_weight(x, (8, 4, 3, 3), dy, padding=1, groups=2)
    assert dw.is_contiguous() and dw.shape == (8, 4, 3, 3)
    ref = torch.nn.grad.conv2d_weight(x.detach().double(), (8, 4, 3, 3), dy.double(), padding=1, groups=2)
    assert relative_error(dw, ref) < 1e-6


def test_dw_is_differentiable_like_torchs():
    x, ws, dy = depthwise(dtype=torch.float64)
    x.requires_grad_(True)
    dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    ref = torch.nn.grad.conv2d_weight(x, ws, dy, padding=1, groups=16)
    assert dw.grad_fn is not None
    probe = torch.randn(ws, dtype=torch.float64, device=DEVICE)
    (ours,) = torch.autograd.grad((dw * probe).sum(), x)
    (theirs,) = torch.autograd.grad((ref * probe).sum(), x)
    assert relative_error(ours, theirs) < 1e-12
    with torch.no_grad(), convwgrad.record_launches() as log:  # no grad wanted: convwgrad's kernels
        convwgrad.conv2d_weight(x.detach().float(), ws, dy.float(), padding=1, groups=16)
    assert log[-1].family == "wgrad_merged"


def test_meta_tensors_give_a_meta_dw_or_name_the_problem():
    x = torch.empty(2, 16, 6, 6, device="meta")
    dw = convwgrad.conv2d_weight(x, (16, 1, 3, 3), x, padding=1, groups=16)
    assert dw.device.type == "meta" and dw.shape == (16, 1, 3, 3)
    with pytest.raises(ValueError, match="grad_output shape"):
        convwgrad.conv2d_weight(x, (16, 1, 3, 3), x, padding=0, groups=16)


def test_disabled_makes_direct_calls_torchs_own():
    x, ws, dy = depthwise()
    with convwgrad.disabled(), convwgrad.record_launches() as log:
        dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=16)
        op = torch.ops.convwgrad.conv_weight(x, dy, list(ws), [1, 1], [1, 1], [1, 1], 16)
    assert log == []
    assert torch.equal(dw, torch_weight_grad(x, ws, dy, 1, 1, 1, 16)) and torch.equal(op, dw)


def test_op_falls_back_like_eager_for_what_torch_computes():
    """A patched float64 layer or an empty batch runs stock torch eagerly; through the op
    (what torch.compile calls) it must give the same answer, not an error."""
    x, ws, dy = depthwise(dtype=torch.float64)
    dw = torch.ops.convwgrad.conv_weight(x, dy, list(ws), [1, 1], [1, 1], [1, 1], 16)
    assert relative_error(dw, torch_dw(x, ws, dy, padding=1, groups=16)) < 1e-12
    x, ws, dy = depthwise(batch=0)
    assert not torch.ops.convwgrad.conv_weight(x, dy, list(ws), [1, 1], [1, 1], [1, 1], 16).any()


def test_patched_float64_and_empty_batch_layers_compile_like_eager():
    layer = convwgrad.patch(torch.nn.Conv2d(16, 16, 3, padding=1, groups=16).double())
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    for batch in (2, 0):
        x = torch.randn(batch, 16, 6, 6, dtype=torch.float64)
        compiled(x).sum().backward()
        grad, layer.weight.grad = layer.weight.grad, None
        layer(x).sum().backward()
        assert torch.allclose(grad, layer.weight.grad)
        layer.weight.grad = None


@pytest.mark.parametrize("dy_layout", ["same", "other"])
def test_op_matches_layouts_only_where_they_differ(dy_layout, no_tf32):
    """The op copies grad_output into the input's layout where autograd handed it over in another
    (decided once per signature); repeats of either signature stay right on fresh data."""
    x, ws, dy = depthwise()
    x = x.contiguous(memory_format=torch.channels_last)
    if dy_layout == "same":
        dy = dy.contiguous(memory_format=torch.channels_last)
    for _ in range(2):
        x.normal_(), dy.normal_()
        dw = torch.ops.convwgrad.conv_weight(x, dy, list(ws), [1, 1], [1, 1], [1, 1], 16)
        assert relative_error(dw, torch_dw(x, ws, dy, padding=1, groups=16)) < 1e-5


def tensors_kept_by(root) -> list[torch.Tensor]:
    """The non-meta tensors reachable from ``root`` through closures, defaults, bound methods,
    containers and convwgrad's own objects. Not followed: module globals, functools.partial,
    torch's and Triton's objects (no family keeps a tensor there today)."""
    seen, found, stack = set(), [], [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "meta":
                found.append(obj)
        elif isinstance(obj, types.FunctionType):
            for cell in obj.__closure__ or ():
                try:
                    stack.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            stack.extend(obj.__defaults__ or ())
        elif isinstance(obj, types.MethodType):
            stack.extend((obj.__self__, obj.__func__))
        elif isinstance(obj, (tuple, list, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif type(obj).__module__.startswith("convwgrad"):
            stack.extend(getattr(obj, slot, None) for klass in type(obj).__mro__
                         for slot in getattr(klass, "__slots__", ()))
            stack.extend(getattr(obj, "__dict__", {}).values())
    return found


def test_the_walk_finds_a_kept_tensor():
    """The walk below can fail: a tensor kept in a closure of a prepared call's run is found."""
    from convwgrad.provider.dispatch import _PreparedCall

    kept = torch.empty(1)
    prepared = _PreparedCall(lambda x, dy, out, workspace: kept, (), "k", "f")
    assert [t is kept for t in tensors_kept_by(prepared)] == [True]
    assert tensors_kept_by(_PreparedCall(lambda x, dy, out, workspace: x, (), "k", "f")) == []


@pytest.mark.parametrize("family, layout", [(family, "channels_last") for family in (
    "aten", "wgrad_merged", "wgrad_splitk", "wgrad_direct", "wgrad_shifted")] + [pytest.param(
        "aten_channels_last", "contiguous", marks=pytest.mark.gpu)])  # the family refuses the CPU
def test_prepared_calls_keep_no_tensor_alive(family, layout):
    """A prepared call lives as long as the planning context; a tensor it kept would be one allocated
    wherever its first call ran. Under torch.compile(mode="reduce-overhead") that is a CUDA-graph
    warm-up, whose allocations must all be outputs or freed: the aten family's kept weight stand-in
    broke UniRepLKNet-T there (17 "tensors in the cudagraph pool not tracked as outputs")."""
    dtype = "fp32" if DEVICE == "cpu" else "bf16"  # the interpreter's bf16 dot is wrong; on CUDA every family plans bf16
    problem = ConvProblem.build(batch=2, groups=8, in_channels=8, input_size=(7, 7), filter_size=5, padding=2,
                                dtype=dtype, layout=layout)
    plan = convwgrad.plan(problem, DEVICE if DEVICE != "cpu" else None, family=family)
    x, dy = make_inputs(problem, DEVICE)
    clear_prepared_calls()
    with convwgrad.record_launches() as log:
        dispatch_conv_grouped(problem, x, dy, plan=plan)
        convwgrad.conv2d_weight(x, problem.weight_size, dy, padding=2, groups=8)
    assert log[0].family == family
    assert len(_prepared._calls) == 2
    for prepared in _prepared._calls.values():
        kept = tensors_kept_by(prepared)
        assert kept == [], f"{prepared.kernel_name} keeps {[(t.shape, t.device) for t in kept]}"


@pytest.mark.parametrize("with_out", [False, True])
def test_whole_call_families_give_a_plain_dw_for_inputs_that_require_grad(with_out):
    """dispatch_conv_grouped is a kernel call, not an autograd op: the aten family's dW carries no graph
    (as the Triton families' does not), and an ``out`` that requires grad is written like a kernel's."""
    x, ws, dy = depthwise(dtype=torch.float32)
    problem = ConvProblem.from_tensors(x, ws, dy, 1, 1, 1, 16)
    x.requires_grad_(True)
    out = torch.empty(ws, device=DEVICE, requires_grad=True) if with_out else None
    chosen = convwgrad.plan(problem, DEVICE if DEVICE != "cpu" else None, family="aten")
    dw = dispatch_conv_grouped(problem, x, dy, plan=chosen, out=out)
    assert dw.grad_fn is None and (out is None or dw is out)
    ref = torch.nn.grad.conv2d_weight(x.detach().double(), ws, dy.double(), padding=1, groups=16)
    assert relative_error(dw, ref) < 1e-6


@pytest.fixture
def workspace_requests(monkeypatch):
    """Every two-stage call's workspace request: "kept" (the dispatcher's per-thread, per-stream
    one) or "per call", with a split-K plan pinned so the CPU's calls have a workspace."""
    from convwgrad.provider import dispatch
    from convwgrad.provider.plan import plan as real_plan

    requests = []
    workspace = dispatch._workspace
    monkeypatch.setattr(dispatch, "_workspace", lambda nbytes, device: requests.append("kept") or workspace(
        nbytes, device))
    monkeypatch.setattr(dispatch, "make_plan", lambda problem, target=None: real_plan(
        problem, target, family="wgrad_splitk", split_k=2))
    clear_prepared_calls()
    yield requests
    clear_prepared_calls()


def test_eager_calls_keep_the_workspace_and_the_op_allocates_its_own(workspace_requests, no_tf32):
    """The custom op runs inside compiled graphs, whose CUDA-graph trees route the thread's
    allocations to the graph's pool while warming up: a workspace kept from there would outlive it."""
    import convwgrad.frameworks  # noqa: F401  (registers the ops)

    problem = ConvProblem.build(batch=2, groups=4, in_channels=4, input_size=(5, 6), filter_size=3, padding=1,
                                dtype="fp32", layout="channels_last")
    x, dy = make_inputs(problem, DEVICE)
    reference = torch_weight_grad(x.double(), problem.weight_size, dy.double(), 1, 1, 1, 4)
    for call in (lambda: convwgrad.conv2d_weight(x, problem.weight_size, dy, 1, 1, 1, 4),
                 lambda: torch.ops.convwgrad.conv_weight(x, dy, list(problem.weight_size), [1, 1], [1, 1], [1, 1], 4)):
        for _ in range(2):
            with convwgrad.record_launches() as log:
                dw = call()
            assert log[-1].family == "wgrad_splitk" and len(log[-1].kernels) == 2, log
            assert relative_error(dw, reference) < 1e-5
    assert workspace_requests == ["kept", "kept"], workspace_requests

    weight = torch.randn(problem.weight_size, dtype=x.dtype, device=x.device, requires_grad=True)
    from convwgrad.frameworks.torch_ops import eager_conv

    eager_conv(x, weight, None, [1, 1], [1, 1], [1, 1], 4).backward(dy)
    assert workspace_requests == ["kept"] * 3, "EagerConv's backward should ask for the kept workspace"
    assert relative_error(weight.grad, reference) < 1e-5


def test_off_cuda_no_workspace_is_kept():
    from convwgrad.provider import dispatch

    convwgrad.release_workspaces()
    first, second = (dispatch._workspace(64, torch.device("cpu")) for _ in range(2))
    assert first.numel() == second.numel() == 64 and first.data_ptr() != second.data_ptr()
    assert not dispatch._kept_here()


def test_a_family_with_only_a_launch_hook_gets_a_workspace_of_exactly_its_bytes(monkeypatch, no_tf32):
    """Its hook was promised workspace_nbytes bytes; a caller's longer workspace (or the kept one) is
    cut to that for it. A family with a prepare hook handles a longer one itself."""
    from convwgrad.plugins.wgrad_splitk import plugin as splitk

    seen = []
    launch = splitk._launch
    monkeypatch.setattr(splitk, "_prepare", None)  # the dispatcher then calls the launch hook every run
    monkeypatch.setattr(splitk, "_launch", lambda problem, spec, target, input, grad_output, out, workspace: (
        seen.append(workspace.numel()) or launch(problem, spec, target, input, grad_output, out, workspace)))
    problem = ConvProblem.build(batch=2, groups=4, in_channels=8, input_size=(5, 6), filter_size=3, padding=1,
                                dtype="fp32", layout="channels_last")
    plan = convwgrad.plan(problem, None, family="wgrad_splitk", split_k=2)
    assert plan.workspace_nbytes > 0
    x, dy = make_inputs(problem, DEVICE)
    clear_prepared_calls()
    longer = torch.empty(plan.workspace_nbytes + 64, dtype=torch.uint8, device=x.device)
    dw = dispatch_conv_grouped(problem, x, dy, plan=plan, workspace=longer)
    assert seen == [plan.workspace_nbytes]
    reference = torch_weight_grad(x.double(), problem.weight_size, dy.double(), 1, 1, 1, 4)
    assert relative_error(dw, reference) < 1e-5
    clear_prepared_calls()
