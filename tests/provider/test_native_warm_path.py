"""The native warm path (``convwgrad/provider/native``): it must answer exactly what the Python
warm path answers, run where it says it runs (its hit counter), and miss (so that Python decides)
wherever the Python path would validate, plan afresh, record or capture."""

import threading

import pytest
import torch

import convwgrad
from convwgrad.provider import build_plugin_manager, get_plugin_manager, native, use_plugin_manager
from convwgrad.provider.dispatch import clear_prepared_calls
from convwgrad.provider.plan import clear_plan_cache
from convwgrad.provider.reference import relative_error
from support import DEVICE

#: a manager whose only family is aten: calls become the native table's whole aten calls
ATEN_ONLY = ("convwgrad.plugins.aten_fallback:plugin", "convwgrad.selectors")


@pytest.fixture(scope="module")
def module():
    loaded = native.load()
    assert loaded is not None, f"the native warm path did not load: {native.status()}"
    return loaded


@pytest.fixture
def aten_only(module):
    with use_plugin_manager(build_plugin_manager(default_plugins=ATEN_ONLY, load_entrypoints=False)):
        clear_prepared_calls()
        yield
    clear_prepared_calls()


def python_path(fn, *args, **kwargs):
    """``fn`` with the native warm path out of the way: the reference answer."""
    call, native.call = native.call, None
    try:
        return fn(*args, **kwargs)
    finally:
        native.call = call


def hits():
    return native.stats()[0]


def layer(rank=2, channels=6, size=7, k=3, batch=2, dtype=torch.float32, channels_last=False, multiplier=1,
          out=None):
    """x, weight_size, dy of a depthwise (or channel-multiplier) layer; dy of ``out`` a side (``size``)."""
    x = torch.randn(batch, channels, *(size,) * rank, dtype=dtype, device=DEVICE)
    dy = torch.randn(batch, channels * multiplier, *(out or size,) * rank, dtype=dtype, device=DEVICE)
    if channels_last:
        x, dy = (t.movedim(1, -1).contiguous().movedim(-1, 1) for t in (x, dy))
    return x, (channels * multiplier, 1, *(k,) * rank), dy


CASES = {  # name: (layer kwargs, call kwargs)
    "2d": ({}, dict(padding=1, groups=6)),
    "2d-channels-last": ({"channels_last": True}, dict(padding=1, groups=6)),
    "2d-stride-dilation": ({"size": 11, "out": 6}, dict(stride=2, padding=2, dilation=2, groups=6)),
    "1d-k5-multiplier": ({"rank": 1, "size": 13, "k": 5, "multiplier": 2}, dict(padding=2, groups=6)),
    "3d": ({"rank": 3, "size": 5}, dict(padding=(1, 1, 1), groups=6)),
    "bf16": ({"dtype": torch.bfloat16}, dict(padding=[1, 1], groups=6)),
}


def nd_weight(x):
    return {3: convwgrad.conv1d_weight, 4: convwgrad.conv2d_weight, 5: convwgrad.conv3d_weight}[x.dim()]


@pytest.mark.parametrize("case", CASES)
def test_whole_aten_calls_run_natively_and_equal_the_python_path_bitwise(case, aten_only):
    shape, kwargs = CASES[case]
    x, ws, dy = layer(**shape)
    conv = nd_weight(x)
    conv(x, ws, dy, **kwargs)  # the first call prepares and keeps
    for _ in range(2):  # fresh values, the same signature
        x.normal_(), dy.normal_()
        before = hits()
        dw = conv(x, ws, dy, **kwargs)
        assert hits() == before + 1, native.status()
        expected = python_path(conv, x, ws, dy, **kwargs)
        assert dw.dtype == x.dtype and dw.shape == ws and dw.is_contiguous()
        assert torch.equal(dw, expected)
        reference = {3: torch.nn.grad.conv1d_weight, 4: torch.nn.grad.conv2d_weight,
                     5: torch.nn.grad.conv3d_weight}[x.dim()](x.double(), ws, dy.double(), **kwargs)
        assert relative_error(dw, reference) < (1e-2 if x.dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("route", ["asymmetric-padding", "layouts-matched", "float64", "triton"])
def test_other_prepared_calls_are_called_from_the_native_table(route, module, no_tf32):
    """Everything but a whole aten call runs the Python prepared call, reached from C++."""
    x, ws, dy = layer()
    call = dict(weight_size=ws, stride=1, padding=1, dilation=1, groups=6)
    fn = convwgrad.provider.dispatch.conv_weight
    if route == "asymmetric-padding":
        dy = torch.randn(2, 6, 8, 7, device=DEVICE)
        call["padding"] = ((1, 2), (1, 1))
    elif route == "layouts-matched":  # the custom op's call: grad_output copied into the input's layout
        dy = dy.contiguous(memory_format=torch.channels_last)
        fn = lambda *a, **k: convwgrad.provider.dispatch.conv_weight(*a, match_layouts=True, **k)  # noqa: E731
    elif route == "float64":
        x, dy = x.double(), dy.double()
    context = (use_plugin_manager(build_plugin_manager(default_plugins=ATEN_ONLY, load_entrypoints=False))
               if route != "triton" else _nothing())
    with context:
        clear_prepared_calls()
        fn(x, grad_output=dy, **call)
        x.normal_(), dy.normal_()
        before = hits()
        dw = fn(x, grad_output=dy, **call)
        assert hits() == before + 1
        assert torch.equal(dw, python_path(fn, x, grad_output=dy, **call))
    clear_prepared_calls()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("family", ["aten", "triton"])
def test_dispatch_with_the_same_problem_and_plan_objects_runs_natively(family, module, no_tf32):
    x, ws, dy = layer()
    problem = convwgrad.ConvProblem.from_tensors(x, ws, dy, 1, 1, 1, 6)
    plan = None if family == "triton" else convwgrad.plan(problem, DEVICE if DEVICE != "cpu" else None,
                                                          family="aten")
    dispatch = convwgrad.dispatch_conv_grouped
    dispatch(problem, x, dy, plan=plan)
    x.normal_(), dy.normal_()
    before = hits()
    dw = dispatch(problem, x, dy, plan=plan)
    assert hits() == before + 1
    call, native.call_problem = native.call_problem, None
    try:
        assert torch.equal(dw, dispatch(problem, x, dy, plan=plan))
    finally:
        native.call_problem = call
    out = torch.full(ws, float("nan"), device=DEVICE)
    before = hits()
    assert dispatch(problem, x, dy, plan=plan, out=out) is out and hits() == before  # out=: the Python path
    assert torch.equal(out, dw)
    equal_problem = convwgrad.ConvProblem.from_tensors(x, ws, dy, 1, 1, 1, 6)  # another object: kept anew
    assert torch.equal(dispatch(equal_problem, x, dy, plan=plan), dw) and hits() == before


def test_the_triton_route_is_recorded_through_the_python_path(module, no_tf32):
    """An open log takes the Python path, which records; the native table is not consulted."""
    x, ws, dy = layer()
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    before = hits()
    with convwgrad.record_launches() as log:
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    assert hits() == before and [r.family for r in log] == ["wgrad_merged"]


@pytest.mark.parametrize("argument, bad", [("stride", 2.0), ("stride", True), ("padding", 1.0),
                                           ("groups", 6.0), ("padding", ((1.0, 1), (1, 1)))])
def test_what_is_not_exact_ints_misses_and_is_validated_every_call(argument, bad, aten_only):
    x, ws, dy = layer()
    call = dict(stride=1, padding=1, groups=6)
    convwgrad.conv2d_weight(x, ws, dy, **call)  # the int signature, kept natively
    assert native.stats()[2] >= 1
    for _ in range(2):
        with pytest.raises((TypeError, ValueError), match=argument):
            convwgrad.conv2d_weight(x, ws, dy, **{**call, argument: bad})


def test_a_tensor_subclass_misses_and_is_still_right(aten_only):
    class Marked(torch.Tensor):
        pass

    x, ws, dy = layer()
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    before = hits()
    dw = convwgrad.conv2d_weight(x.as_subclass(Marked), ws, dy.as_subclass(Marked), padding=1, groups=6)
    assert hits() == before
    assert torch.equal(torch.Tensor(dw), python_path(convwgrad.conv2d_weight, x, ws, dy, padding=1, groups=6))


def test_a_torch_function_mode_sees_the_python_path(aten_only):
    class Seen(torch.overrides.TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Seen.calls += 1
            return func(*args, **(kwargs or {}))

    x, ws, dy = layer()
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    before = hits()
    with Seen():
        dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    assert hits() == before and Seen.calls > 0
    assert torch.equal(dw, python_path(convwgrad.conv2d_weight, x, ws, dy, padding=1, groups=6))


def test_inputs_that_require_grad_give_a_plain_dw_under_no_grad(aten_only):
    x, ws, dy = layer()
    x.requires_grad_(True)
    with torch.no_grad():
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
        before = hits()
        dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    assert hits() == before + 1 and dw.grad_fn is None and not dw.requires_grad


def _kept_call_misses(change, undo):
    x, ws, dy = layer()
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    changes = native.stats()[3]
    change()
    try:
        before = hits()
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
        assert hits() == before and native.stats()[3] > changes, "a changed planning context must miss"
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
        assert hits() == before + 1  # kept again under the new context
    finally:
        undo()


def test_the_tf32_switch_drops_the_kept_calls(aten_only):
    previous = torch.backends.cudnn.allow_tf32
    _kept_call_misses(lambda: setattr(torch.backends.cudnn, "allow_tf32", not previous),
                      lambda: setattr(torch.backends.cudnn, "allow_tf32", previous))


def test_clearing_the_plan_cache_drops_the_kept_calls(aten_only):
    _kept_call_misses(clear_plan_cache, lambda: None)


def test_the_tuning_cache_variable_drops_the_kept_calls(aten_only, monkeypatch, tmp_path):
    from convwgrad.selectors import tuning as tuning_cache

    tuning = tmp_path / "tuning.json"
    tuning_cache._write(str(tuning), [])
    _kept_call_misses(lambda: monkeypatch.setenv("CONVWGRAD_TUNING_CACHE", str(tuning)),
                      lambda: monkeypatch.delenv("CONVWGRAD_TUNING_CACHE"))


def test_a_plugin_registered_on_the_live_manager_drops_the_kept_calls(aten_only):
    pm = get_plugin_manager()

    class Extra:
        pass

    extra = Extra()
    _kept_call_misses(lambda: pm.register(extra, name="extra"), lambda: pm.unregister(extra))


def test_another_plugin_manager_reroutes_a_kept_signature(module, no_tf32):
    x, ws, dy = layer()
    clear_prepared_calls()
    for _ in range(2):
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    with use_plugin_manager(build_plugin_manager(default_plugins=ATEN_ONLY, load_entrypoints=False)):
        with convwgrad.record_launches() as log:
            convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    assert [r.family for r in log] == ["aten"]
    with convwgrad.record_launches() as log:
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    assert [r.family for r in log] == ["wgrad_merged"]


def test_disabled_is_torchs_own_even_for_a_kept_signature(aten_only):
    x, ws, dy = layer()
    for _ in range(2):
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    before = hits()
    with convwgrad.disabled():
        dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
    assert hits() == before
    assert relative_error(dw, torch.nn.grad.conv2d_weight(x.double(), ws, dy.double(), padding=1, groups=6)) < 1e-5


def test_many_threads_share_the_table_and_all_get_the_right_answer(aten_only):
    layers = [layer(channels=c, size=s) for c, s in ((4, 5), (6, 7), (8, 9))]
    for x, ws, dy in layers:
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=ws[0])
    expected = [python_path(convwgrad.conv2d_weight, x, ws, dy, padding=1, groups=ws[0]) for x, ws, dy in layers]
    errors = []

    def work(index):
        try:
            for i in range(30):
                x, ws, dy = layers[(index + i) % 3]
                dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=ws[0])
                if not torch.equal(dw, expected[(index + i) % 3]):
                    errors.append(f"thread {index} call {i}: wrong dW")
                if i == 15 and index == 0:
                    clear_prepared_calls()  # a clear while the others call
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_the_table_is_bounded_like_the_python_one(aten_only, monkeypatch):
    from convwgrad.provider import dispatch

    module = native.load()
    try:
        module.configure(*_configuration(dispatch, max_calls=2))
        for size in (5, 6, 7):
            x, ws, dy = layer(size=size)
            convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
        assert native.stats()[2] <= 2
    finally:
        dispatch._configure_native(module)


def _configuration(dispatch, max_calls):
    return (get_plugin_manager.__globals__, "_current", "_name2plugin", dispatch.planning_epoch.__globals__, "_epoch",
            dispatch.PLANNING_ENVIRONMENT, dispatch._cuda_capturing, max_calls)


def test_the_status_names_the_loaded_extension(module):
    assert native.is_loaded() and native.status().startswith("loaded: ") and module.__file__ in native.status()


def test_bad_keep_arguments_are_type_errors_not_crashes(module):
    x, ws, dy = layer()
    with pytest.raises(TypeError, match="aten_call"):
        module.keep(x, dy, ws, 1, 1, 1, 6, False, None, ("not", "five"))
    with pytest.raises(TypeError, match="callable"):
        module.keep(x, dy, ws, 1, 1, 1, 6, False, "not callable", None)
    with pytest.raises(TypeError, match="9 arguments"):
        module.call(x, dy)


def _fresh_process(tmp_path, **environment):
    """One direct conv2d_weight call in a fresh interpreter with ``environment``: the native path's status,
    the call's error against float64 and the warnings it raised."""
    import json
    import os
    import subprocess
    import sys

    script = """
import json, warnings, torch, convwgrad
from convwgrad.provider import native
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    x, dy = torch.randn(2, 6, 7, 7), torch.randn(2, 6, 7, 7)
    dw = convwgrad.conv2d_weight(x, (6, 1, 3, 3), dy, padding=1, groups=6)
    ref = torch.nn.grad.conv2d_weight(x.double(), (6, 1, 3, 3), dy.double(), padding=1, groups=6)
    error = float((dw.double() - ref).norm() / ref.norm())
print(json.dumps({"status": native.status(), "error": error, "warnings": [str(w.message) for w in caught]}))
"""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"), **environment}
    env.pop("TRITON_INTERPRET", None)  # the aten route: no interpreter needed
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_failed_build_warns_and_the_python_path_answers(tmp_path):
    report = _fresh_process(tmp_path, CONVWGRAD_NATIVE="wait", CXX=str(tmp_path / "no-such-compiler"))
    assert report["status"].startswith("build failed"), report
    assert any("native warm path could not be built" in w for w in report["warnings"]), report
    assert report["error"] < 1e-6


def test_native_off_builds_nothing(tmp_path):
    report = _fresh_process(tmp_path, CONVWGRAD_NATIVE="0")
    assert report["status"].startswith("off") and report["error"] < 1e-6, report
    assert not (tmp_path / "extensions").exists()


def _random_call(rng):
    """A random valid depthwise / channel-multiplier call: rank 1-3, any padding spelling, strided views."""
    rank = int(rng.integers(1, 4))
    channels, multiplier = int(rng.integers(1, 6)), int(rng.choice([1, 2]))
    k = [int(rng.integers(1, 4)) for _ in range(rank)]
    stride = [int(rng.integers(1, 3)) for _ in range(rank)]
    dilation = [int(rng.integers(1, 3)) for _ in range(rank)]
    pairs = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(rank)]
    spelling = rng.choice(["int", "list", "tuple", "pairs", "asymmetric"])
    if spelling == "int":
        pairs = [(pairs[0][0],) * 2] * rank
        padding = pairs[0][0]
    elif spelling in ("list", "tuple"):
        pairs = [(lo, lo) for lo, _ in pairs]
        padding = [lo for lo, _ in pairs] if spelling == "list" else tuple(lo for lo, _ in pairs)
    elif spelling == "pairs":
        pairs = [(lo, lo) for lo, _ in pairs]
        padding = tuple(pairs)
    else:
        padding = tuple(pairs)
    size = [int(rng.integers(d * (f - 1) + 1, 9)) for d, f in zip(dilation, k)]
    out = [(s + lo + hi - d * (f - 1) - 1) // st + 1 for s, (lo, hi), d, f, st in zip(size, pairs, dilation, k, stride)]
    dtype = rng.choice([torch.float32, torch.bfloat16, torch.float64])
    batch = int(rng.integers(1, 3))
    x = torch.randn(batch, channels * 2, *size, dtype=dtype, device=DEVICE)[:, ::2]  # a channel-strided view
    dy = torch.randn(batch, channels * multiplier, *out, dtype=dtype, device=DEVICE)
    if rng.random() < 0.5:
        dy = dy.movedim(1, -1).contiguous().movedim(-1, 1)
    weight_size = (channels * multiplier, 1, *k)
    return x, weight_size, dy, dict(stride=stride if rng.random() < 0.5 else tuple(stride), padding=padding,
                                    dilation=dilation, groups=channels)


@pytest.mark.parametrize("family", ["aten", "interpreted"])
def test_random_calls_run_natively_and_equal_the_python_path(family, module, no_tf32):
    """40 random calls: every repeat is a native hit, bitwise equal to the Python path, right against float64."""
    import numpy as np

    rng = np.random.default_rng(15 if family == "aten" else 16)
    context = (use_plugin_manager(build_plugin_manager(default_plugins=ATEN_ONLY, load_entrypoints=False))
               if family == "aten" else _nothing())
    count = 40 if family == "aten" else 8  # the interpreter is slow
    with context:
        clear_prepared_calls()
        for case in range(count):
            x, ws, dy, kwargs = _random_call(rng)
            conv = nd_weight(x)
            conv(x, ws, dy, **kwargs)
            before = hits()
            dw = conv(x, ws, dy, **kwargs)
            assert hits() == before + 1, (case, x.shape, ws, kwargs)
            assert torch.equal(dw, python_path(conv, x, ws, dy, **kwargs)), (case, x.shape, ws, kwargs)
            ref = torch.ops.aten.convolution_backward(  # float64 through torch, padding applied by hand
                dy.double(), torch.nn.functional.pad(x.double(), _pad_list(kwargs["padding"], x.dim() - 2)),
                torch.empty(ws, dtype=torch.float64, device=DEVICE), None, list(kwargs["stride"]), [0] * (x.dim() - 2),
                kwargs["dilation"], False, [0] * (x.dim() - 2), kwargs["groups"], [False, True, False])[1]
            tolerance = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 2e-2}[x.dtype]
            assert relative_error(dw, ref) < tolerance, (case, x.shape, ws, kwargs)
    clear_prepared_calls()


def _pad_list(padding, rank):
    """F.pad's argument (last dim first) for any of conv*d_weight's padding spellings."""
    pairs = [(padding, padding)] * rank if isinstance(padding, int) else [
        (p, p) if isinstance(p, int) else tuple(p) for p in padding]
    return [v for pair in reversed(pairs) for v in pair]


def test_mixed_tf32_apis_neither_break_calls_nor_leak(aten_only):
    """torch >= 2.9's per-operator TF32 setting beside the legacy switch: torch then refuses the legacy
    reading for cuDNN as a whole; the conv operator's own setting decides, and nothing is leaked."""
    import sys

    from convwgrad.provider.target import cudnn_conv_allows_tf32

    conv = getattr(torch.backends.cudnn, "conv", None)
    if getattr(conv, "fp32_precision", None) is None:
        pytest.skip("this torch has no per-operator TF32 setting")
    previous = conv.fp32_precision
    x, ws, dy = layer()
    pm = get_plugin_manager()
    try:
        conv.fp32_precision = "ieee" if previous == "tf32" else "tf32"
        expected = conv.fp32_precision == "tf32"
        assert cudnn_conv_allows_tf32() is expected
        convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)  # plans and keeps under the new setting
        references = sys.getrefcount(pm)
        for _ in range(50):
            dw = convwgrad.conv2d_weight(x, ws, dy, padding=1, groups=6)
        assert sys.getrefcount(pm) == references
        assert relative_error(dw, torch.nn.grad.conv2d_weight(x.double(), ws, dy.double(), padding=1, groups=6)) < 1e-5
    finally:
        conv.fp32_precision = previous


def test_int_subclass_arguments_of_a_problem_are_served(aten_only):
    import enum

    class One(enum.IntEnum):
        ONE = 1

    x, ws, dy = layer()
    problem = convwgrad.ConvProblem.from_tensors(x, ws, dy, (One.ONE, One.ONE), 1, 1, 6)
    plan = convwgrad.plan(problem, DEVICE if DEVICE != "cpu" else None, family="aten")
    for _ in range(2):
        dw = convwgrad.dispatch_conv_grouped(problem, x, dy, plan=plan)
    assert relative_error(dw, torch.nn.grad.conv2d_weight(x.double(), ws, dy.double(), padding=1, groups=6)) < 1e-5


def test_match_layouts_other_than_a_bool_is_not_served_natively(module):
    x, ws, dy = layer()
    call = convwgrad.provider.dispatch.conv_weight
    call(x, ws, dy, 1, 1, 1, 6, match_layouts=True)
    with pytest.raises(TypeError, match="unhashable"):
        call(x, ws, dy, 1, 1, 1, 6, match_layouts=[1])


def test_a_prepared_call_whose_finaliser_clears_the_table_is_dropped_safely(module):
    x, ws, dy = layer()

    class Prepared:
        def __call__(self, *args):
            return None

        def __del__(self):
            module.clear()  # runs while the table drops this entry

    assert module.keep(x, dy, ws, 1, 1, 1, 6, False, Prepared(), None) in (True, False)
    module.clear()
    assert module.keep(x, dy, ws, 1, 1, 1, 6, False, Prepared(), None) in (True, False)
    module.keep(x, dy, ws, 1, 1, 1, 6, False, Prepared(), None)  # replaces the last: its finaliser runs
    clear_prepared_calls()


def test_a_stale_build_lock_left_by_a_killed_build_is_removed(tmp_path, monkeypatch):
    import os

    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    build = cpp_extension._get_build_directory(native.EXTENSION_NAME, verbose=False)
    lock = os.path.join(build, "lock")
    open(lock, "w").close()
    os.utime(lock, (1, 1))  # older than any build may take
    report = _fresh_process(tmp_path, CONVWGRAD_NATIVE="wait")
    assert report["status"].startswith("loaded"), report
