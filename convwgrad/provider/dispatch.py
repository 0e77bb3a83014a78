"""Running a plan: checks, allocation of dW and workspace, the bound launch.

The warm path. A training step asks for the same layers' dW every step, so everything
that depends only on a call's metadata (the problem, the plan, the tensor checks, the
kernel arguments) is done once per call signature and kept as a prepared call; a repeat
costs a dict lookup, the allocation of dW and the launches. A call signature is the
tensors' shapes, strides, dtypes and devices and the exact arguments (``2`` and ``2.0``
are different signatures: only exact ints are kept, anything else is validated on every
call). A call that fails validation is never kept, so it raises every time. Prepared calls
are dropped when anything that plan() reads changes (plugins, TF32 switch, tuning cache,
``clear_plan_cache()``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

import attrs
import torch

from . import native as _native
from .diagnostics import warn_at_caller
from .layout import current_cuda_device, layout_of, to_layout
from .manager import get_plugin_manager
from .plan import PLANNING_ENVIRONMENT, Plan, plan as make_plan, planning_epoch
from .problem import ConvProblem, dtype_name
from .reference import torch_weight_grad
from .target import cudnn_conv_allows_tf32, current_target, launched

# ----------------------------------------------------------------- on / off
#: CONVWGRAD_DISABLE=1 in the environment starts every thread with convwgrad off.
_DEFAULT_ENABLED = os.environ.get("CONVWGRAD_DISABLE", "") in ("", "0")


class _SwitchState(threading.local):
    enabled = _DEFAULT_ENABLED  # a class default: reading it raises nothing (getattr's default did, ~0.3 us)


_state = _SwitchState()


def is_enabled() -> bool:
    return _state.enabled


def set_enabled(enabled: bool) -> None:
    """Switch convwgrad on or off for this thread: off, every dW it is asked for (patched
    layers, the functional drop-ins, ``conv*d_weight``, the custom op) is torch's own."""
    _state.enabled = bool(enabled)
    _native.thread_enabled_changed(_state.enabled)


@contextlib.contextmanager
def disabled():
    """Run the block with convwgrad off (see :func:`set_enabled`); for debugging."""
    previous = is_enabled()
    set_enabled(False)
    try:
        yield
    finally:
        set_enabled(previous)


# ----------------------------------------------------------------- records
@attrs.frozen
class LaunchRecord:
    kernel_name: str  # the spec's name
    family: str
    kernels: tuple[str, ...]  # the kernels the family reports it launched
    #: the problem computed; None where the call went to torch without posing one (float64, empty batch)
    problem: ConvProblem | None = None


#: Open logs, process-wide: autograd runs a CUDA backward on its own worker thread, so a
#: thread-local log opened around ``loss.backward()`` would miss every weight gradient.
_recorders: list[list] = []
_recorders_lock = threading.Lock()


@contextlib.contextmanager
def record_launches():
    """Collect a :class:`LaunchRecord` for every dispatch, on any thread, while the block runs.
    Blocks may nest and overlap across threads: each log gets every launch of its own lifetime."""
    log: list[LaunchRecord] = []
    with _recorders_lock:
        _recorders.append(log)
        _native.open_logs_changed(len(_recorders))  # a routed layer's native backward leaves dW to Python
    try:
        yield log
    finally:
        with _recorders_lock:  # by identity: two logs holding equal records are still two logs
            del _recorders[next(i for i, open_log in enumerate(_recorders) if open_log is log)]
            _native.open_logs_changed(len(_recorders))


def _record(kernel_name: str, family: str, kernels, problem=None) -> None:
    record = LaunchRecord(kernel_name, family, tuple(kernels), problem)
    with _recorders_lock:
        for log in _recorders:
            log.append(record)


# ----------------------------------------------------------------- prepared calls
#: The Triton interpreter keeps global state while it runs a kernel: two threads
#: interpreting at once corrupt each other (seen with a bare Triton kernel under 8 threads).
_INTERPRETER_LOCK = threading.Lock()


#: An eager two-stage call's fp32 partials go to a workspace kept per thread, device and stream
#: (the caching allocator's torch.empty costs ~8-11 us of host time a call on the H200 machine
#: inside autograd's engine thread, tools/backward_host.py): calls on one stream run in stream
#: order, so a later call may reuse what an earlier one's reduction has finished reading; one
#: thread's calls are sequential, so its launch pairs never interleave with another's. Allocated
#: per call instead: workspaces above this many bytes (their kernels take milliseconds), every
#: workspace while the stream captures a CUDA graph (the graph must own its memory), off CUDA, and
#: in calls through the custom op: torch.compile's CUDA-graph trees run the op's first calls with
#: the thread's allocations routed to the graph's pool, which must hold nothing that outlives them.
KEPT_WORKSPACE_BYTES = 64 << 20


class _KeptWorkspaces:
    """One thread's kept workspaces, (device index, stream) -> uint8 tensor: thread-local, so a
    thread's workspaces go when it does."""

    __slots__ = ("buffers", "__weakref__")

    def __init__(self):
        self.buffers = {}


_thread_workspaces = threading.local()
#: every thread's, for :func:`release_workspaces`
_every_threads_workspaces: "weakref.WeakSet[_KeptWorkspaces]" = weakref.WeakSet()
_workspaces_lock = threading.Lock()


def _kept_here() -> dict:
    """The calling thread's kept workspaces (an empty dict if it has none)."""
    kept = getattr(_thread_workspaces, "kept", None)
    return {} if kept is None else kept.buffers


def _workspace(nbytes: int, device) -> torch.Tensor:
    """A uint8 workspace of at least ``nbytes`` for a call about to launch on ``device``'s current stream."""
    # the capture query reads the current device's stream: a call on another device allocates
    if (device.type != "cuda" or nbytes > KEPT_WORKSPACE_BYTES or device.index != current_cuda_device()
            or _cuda_capturing()):
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    kept = getattr(_thread_workspaces, "kept", None)
    if kept is None:
        kept = _thread_workspaces.kept = _KeptWorkspaces()
        with _workspaces_lock:
            _every_threads_workspaces.add(kept)
    key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    buffer = kept.buffers.get(key)
    if buffer is None or buffer.numel() < nbytes:
        buffer = kept.buffers[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return buffer


def release_workspaces() -> None:
    """Let go of the workspaces kept for two-stage calls (at most KEPT_WORKSPACE_BYTES per thread,
    device and stream that made one; a thread's also go when it ends): the caching allocator then
    has them back, to reuse or to return with ``torch.cuda.empty_cache()``. Calls after this keep
    new ones as needed."""
    with _workspaces_lock:
        for kept in list(_every_threads_workspaces):
            kept.buffers.clear()


class _PreparedCall:
    """One call signature's bound launch: run it, allocate what it needs, record it."""

    __slots__ = ("run", "kernels", "kernel_name", "family", "workspace_nbytes", "device", "serialise", "adapt",
                 "problem", "aten_call", "native")

    def __init__(self, run, kernels, kernel_name, family, workspace_nbytes=0, device=None, serialise=False,
                 adapt=None, problem=None, aten_call=None, native=None):
        self.run = run  # (input, grad_output, out, workspace) -> dW
        self.kernels = kernels  # a tuple, or a list the run updates
        self.kernel_name = kernel_name
        self.family = family
        self.workspace_nbytes = workspace_nbytes
        self.device = device
        self.serialise = serialise
        self.adapt = adapt  # (input, grad_output) -> the pair the launch was bound to, or None
        self.problem = problem
        #: BoundLaunch.aten_call where the whole call is that aten dW (no adapt, no workspace), else None
        self.aten_call = aten_call if adapt is None and not workspace_nbytes else None
        self.native = native  # BoundLaunch.native

    def native_launches(self):
        """(stages, workspace bytes): this call's kernel launches for a routed layer's native backward
        (see :attr:`BoundLaunch.native`), or None: the family tells none, the launch was not run yet,
        operands are copied into another layout first (``adapt``), or kernels are interpreted."""
        if self.native is None or self.adapt is not None or self.serialise:
            return None
        stages = self.native()
        return None if stages is None else (stages, self.workspace_nbytes)

    def __call__(self, input, grad_output, out=None, workspace=None, keep_workspace=True):
        if self.adapt is not None:
            input, grad_output = self.adapt(input, grad_output)
        if self.workspace_nbytes and workspace is None:
            workspace = (_workspace(self.workspace_nbytes, self.device) if keep_workspace else
                         torch.empty(self.workspace_nbytes, dtype=torch.uint8, device=self.device))
        if self.serialise:
            with _INTERPRETER_LOCK:
                dw = self.run(input, grad_output, out, workspace)
        else:
            dw = self.run(input, grad_output, out, workspace)
        if _recorders:
            _record(self.kernel_name, self.family, self.kernels, self.problem)
        return dw


def _launch_hook_binding(pm, problem: ConvProblem, plan: Plan):
    """For a family that binds nothing: call its launch hook on every run, with a workspace of
    exactly the bytes it asked for (the kept one, or a caller's, may be longer)."""
    kernels: list[str] = []
    nbytes = plan.workspace_nbytes

    def run(input, grad_output, out, workspace):
        if out is None:
            out = torch.empty(problem.weight_size, dtype=input.dtype, device=input.device)
        if workspace is not None and workspace.numel() != nbytes:
            workspace = workspace[:nbytes]
        launched = pm.hook.convwgrad_launch(problem=problem, spec=plan.spec, target=plan.target, input=input,
                                            grad_output=grad_output, out=out, workspace=workspace)
        if launched is None:
            raise RuntimeError(f"no plugin launched family {plan.family!r} (is its plugin registered?)")
        kernels[:] = launched
        return out

    return run, kernels


def _bind(problem: ConvProblem, plan: Plan, input, grad_output, out, adapt=None) -> _PreparedCall:
    pm = get_plugin_manager()
    bound = pm.hook.convwgrad_prepare_launch(problem=problem, spec=plan.spec, target=plan.target, input=input,
                                             grad_output=grad_output, out=out)
    if bound is None:
        run, kernels = _launch_hook_binding(pm, problem, plan)
        aten_call = None
    else:
        run, kernels = bound.run, bound.kernels  # a list the run updates stays live: recorded per call
        aten_call = bound.aten_call
    return _PreparedCall(run, kernels, plan.kernel_name, plan.family, plan.workspace_nbytes, input.device,
                         serialise=plan.target.backend == "interpreter", adapt=adapt, problem=problem,
                         aten_call=aten_call, native=None if bound is None else bound.native)


def _planning_context() -> tuple:
    """What plan() reads besides the problem: when it changes, prepared calls plan afresh."""
    pm = get_plugin_manager()
    return (pm, _plugin_set(pm), cudnn_conv_allows_tf32(), planning_epoch(), *map(_environ_get, _PLANNING_ENV_KEYS))


# What _planning_context reads on every warm call, read the cheap way where CPython allows (the
# public spelling costs ~1 us more a call, which a patched layer pays on every forward): os.environ's
# encoded store (os.environ.get encodes the key and decodes the value on every call).
if isinstance(getattr(os.environ, "_data", None), dict) and hasattr(os.environ, "encodekey"):
    _environ_get = os.environ._data.get
    _PLANNING_ENV_KEYS = tuple(os.environ.encodekey(name) for name in PLANNING_ENVIRONMENT)
else:
    _environ_get, _PLANNING_ENV_KEYS = os.environ.get, PLANNING_ENVIRONMENT


def _plugin_set(pm) -> tuple:
    """The registered plugins, cheaply: pluggy's own name -> plugin table when it has one (a
    tuple in registration order, ~0.1 us), else the public set (~0.3 us)."""
    table = getattr(pm, "_name2plugin", None)
    return tuple(table.values()) if isinstance(table, dict) else frozenset(pm.get_plugins())


#: Prepared calls kept; past this many signatures the table starts again (a model has tens of layers).
PREPARED_CALLS_SIZE = 4096


class _PreparedCalls:
    """Values kept by call signature while the planning context stays the same."""

    def __init__(self):
        self._calls: dict = {}
        self._context = None
        self.generation = 0  # bumped whenever the kept values are dropped

    def refresh(self) -> int:
        context = _planning_context()
        if context != self._context:
            self.clear()
            self._context = context
        return self.generation

    def clear(self) -> None:
        self._calls = {}
        self.generation += 1

    def get(self, key):
        self.refresh()
        return self._calls.get(key)

    def keep(self, key, value) -> None:
        if len(self._calls) >= PREPARED_CALLS_SIZE:
            self._calls = {}
        self._calls[key] = value


#: prepared calls; also what the framework layer keeps per layer signature (keys tagged by their user)
_prepared = _PreparedCalls()


def cached_for_planning(key, compute):
    """``compute()`` kept under ``key`` (a hashable tuple whose first item names the caller)
    until the planning context changes; for facts derived from plan(), such as a layer's route."""
    value = _prepared.get(key)
    if value is None:
        value = compute()
        _prepared.keep(key, value)
    return value


def clear_prepared_calls() -> None:
    """Forget every prepared call (tests; plan()'s own cache is :func:`clear_plan_cache`)."""
    _prepared.clear()
    _native.clear()


def _configure_native(module) -> None:
    """Point the native warm path at what :func:`_planning_context` reads: the process-wide manager
    and its pluggy plugin table (as :func:`_plugin_set`), plan()'s epoch, the planning environment,
    and the capture query; torch's cuDNN TF32 switch it reads itself."""
    module.configure(get_plugin_manager.__globals__, "_current", "_name2plugin", planning_epoch.__globals__, "_epoch",
                     PLANNING_ENVIRONMENT, _cuda_capturing, PREPARED_CALLS_SIZE)
    with _recorders_lock:  # the routed layers' native backward: its fallback, the switch, the open logs
        module.configure_backward(_native.run_backward_fallback, _DEFAULT_ENABLED, len(_recorders))


_native._configure = _configure_native


def planning_generation() -> int:
    """An int that changes whenever anything plan() reads changes (plugins, TF32 switch, tuning
    cache, :func:`clear_plan_cache`): what a caller keeping its own routing facts compares."""
    return _prepared.refresh()


_SEQUENCES = (tuple, list, torch.Size)


def _exact_ints(value):
    """``value`` as a hashable key if it is an int or a (nested) sequence of exact ints, else None.
    A flat sequence (every warm call's stride, padding, dilation and weight size) is checked in one
    loop, without a generator or a call per item: the key is built on every call of the warm path."""
    kind = type(value)
    if kind is int:
        return value
    if kind not in _SEQUENCES:
        return None
    items = tuple(value)
    for item in items:
        if type(item) is not int:
            break
    else:
        return items
    nested = tuple(_exact_ints(item) for item in items)  # (before, after) padding pairs
    return None if None in nested else nested


def _tensor_key(tensor):
    return tensor.shape, tensor.stride(), tensor.dtype, tensor.device


# ----------------------------------------------------------------- graph launches
#: torch's own query behind ``torch.cuda.is_current_stream_capturing()`` (~0.2 us; the public one
#: adds a Python frame and an availability check); absent from builds without CUDA.
_cuda_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def _capturing(device) -> bool:
    """Whether a call on ``device`` is being recorded into a CUDA graph (the current stream captures)."""
    return device.type == "cuda" and _cuda_capturing is not None and _cuda_capturing()


#: Backends whose calls can be recorded into CUDA graphs (HIP graphs are not measured yet).
_GRAPH_BACKENDS = ("cuda",)
#: CONVWGRAD_GRAPH_ROUTES=0 in the environment: no graph routes (every capture keeps the eager plan),
#: so no call prepares, compiles or runs a route it may never use (a program that never captures)
_GRAPH_ROUTES = os.environ.get("CONVWGRAD_GRAPH_ROUTES", "1") != "0"


def graph_routes_apply(target) -> bool:
    """Whether calls planned for ``target`` take a separate plan for graph launches when a CUDA
    graph records them (see :func:`_warm_graph_route`)."""
    return _GRAPH_ROUTES and target.backend in _GRAPH_BACKENDS and target.launch != "graph"


def _graph_key(key):
    return ("graph launch", key)


def _warm_graph_route(problem, plan, input, grad_output, out, adapt):
    """The prepared call of ``plan`` replanned for kernels launched from CUDA graphs, where that
    plan differs, run once now, or None.

    A call recorded into a CUDA graph costs only its kernel time when replayed, so the router may
    choose another family there (target.launch == "graph"). Its kernels must be compiled and loaded
    before any capture: loading a module (cuModuleLoadData) while the stream captures invalidates
    the capture. So the graph route of a call signature is bound and run once here, outside
    capture, on the call's own operands into a scratch dW (torch.compile's CUDA-graph warm-up runs
    every call eagerly first); a capture then finds it ready. A signature first seen inside a
    capture keeps the eager plan. The run is one extra dW per signature, once, and only where the
    router plans graph launches otherwise (CONVWGRAD_GRAPH_ROUTES=0 turns it off). A tuning-cache
    entry is measured best for both launches, so a tuned signature has no graph route."""
    if not graph_routes_apply(plan.target):
        return None
    if _capturing(input.device):
        return None  # first seen inside a capture: the route's kernels cannot be loaded now
    # unaligned operands: their warm-up would load a Triton specialisation that an aligned capture
    # (the usual one) does not launch
    if not _aligned(input, grad_output, out):
        return None
    graph_plan = None
    try:
        graph_plan = make_plan(problem, launched(plan.target, "graph"))
        if graph_plan.spec == plan.spec:
            return None
        prepared = _bind(problem, graph_plan, input, grad_output, out, adapt)
        workspace = (torch.empty(prepared.workspace_nbytes, dtype=torch.uint8, device=input.device)
                     if prepared.workspace_nbytes else None)
        # into a scratch dW of the caller's strides (the route is bound to them), never the caller's own
        scratch = None if out is None else torch.empty_strided(out.shape, out.stride(), dtype=out.dtype,
                                                               device=out.device)
        # prepared.run, not the call: the warm-up is no launch of the caller's, so it is not recorded
        prepared.run(input, grad_output, scratch, workspace)
    except Exception as exc:  # the eager call stands; a capture then keeps the eager plan too
        route = "" if graph_plan is None else f" ({graph_plan.kernel_name})"
        warn_at_caller(f"convwgrad: the CUDA-graph route of {problem.describe()}{route} could not be prepared, "
                       f"so captures of it keep {plan.kernel_name}: {type(exc).__name__}: {exc}")
        return None
    return prepared


# ----------------------------------------------------------------- checks
def _check_tensor(name, tensor, shape, dtype, device):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, the problem needs {tuple(shape)}")
    if dtype_name(tensor.dtype) != dtype:
        raise ValueError(f"{name} has dtype {tensor.dtype}, the problem needs {dtype}")
    if device is not None and tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, the other tensors on {device}")


def _check_no_self_overlap(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor two of whose elements share memory (``expand``, zero or interleaved strides):
    a kernel writing it would race with itself and leave a wrong result."""
    dims = sorted((stride, size) for size, stride in zip(tensor.shape, tensor.stride()) if size > 1)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            raise ValueError(f"{name} has overlapping memory (shape {tuple(tensor.shape)}, strides "
                             f"{tensor.stride()}): dW needs one element per address; pass a fresh tensor")
        extent = stride * size


def _check_workspace(workspace, nbytes: int, device) -> None:
    if workspace.dtype != torch.uint8 or workspace.numel() < nbytes or not workspace.is_contiguous():
        raise ValueError(
            f"workspace must be a contiguous uint8 tensor of >= {nbytes} bytes, "
            f"got {workspace.dtype} with {workspace.numel()} elements"
        )
    if workspace.device != device:
        raise ValueError(f"workspace is on {workspace.device}, the tensors on {device}")


# ----------------------------------------------------------------- the problem-level API
def dispatch_conv_grouped(
    problem: ConvProblem,
    input: torch.Tensor,
    grad_output: torch.Tensor,
    *,
    plan: Plan | None = None,
    out: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compute dW of ``problem`` from ``input`` and ``grad_output``; return it.

    ``plan`` defaults to :func:`convwgrad.plan` for the tensors' device; inside a CUDA-graph capture,
    to the plan for graph launches where the call was warmed (see :func:`conv_weight`) and neither
    ``workspace`` is given (it was sized by the eager plan) nor an operand is unaligned.
    ``out`` (shape ``problem.weight_size``, the problem's dtype, no overlapping memory)
    is written in place and returned when given; otherwise dW is a new contiguous tensor.
    ``workspace`` (uint8, at least ``plan.workspace_nbytes``) is allocated when not given.
    A repeat with the same ``problem`` and ``plan`` objects and neither ``out`` nor ``workspace`` is
    looked up by the native warm path (``provider/native``) first.
    """
    native_call = _native.call_problem
    plain = out is None and workspace is None
    if plain and native_call is not None and not _recorders:
        grad_weight = native_call(problem, plan, input, grad_output)
        if grad_weight is not None:
            return grad_weight
    try:
        key = (problem, plan, _tensor_key(input), _tensor_key(grad_output),
               None if out is None else _tensor_key(out))
        graph_launch = plan is None and workspace is None and _capturing(input.device)
        prepared = _lookup(key, graph_launch, input, grad_output, out)
    except (AttributeError, TypeError):  # not tensors, or not hashable: the checks below say which
        key = prepared = None
    if prepared is None:
        prepared, graph_route = _prepare_dispatch(problem, input, grad_output, plan, out)
        if key is not None:
            _keep_with_graph_route(key, prepared, graph_route, input.device)
    if plain and key is not None and not _capturing(input.device):
        _native.keep_problem(problem, plan, input, grad_output, prepared, prepared.aten_call)
    if workspace is not None:
        if prepared.workspace_nbytes:
            _check_workspace(workspace, prepared.workspace_nbytes, input.device)
        else:
            workspace = None
    return prepared(input, grad_output, out, workspace)


def _aligned(*tensors) -> bool:
    """Every data pointer 16-byte aligned: what Triton specialises its kernels on."""
    pointers = 0
    for tensor in tensors:
        if tensor is not None:
            pointers |= tensor.data_ptr()
    return not pointers & 15


def _lookup(key, capturing: bool, *tensors):
    """The prepared call kept for ``key``; while a CUDA graph captures, its graph route if one was
    warmed (:func:`_warm_graph_route`) and ``tensors`` are aligned as the warm-up's were (another
    alignment is another Triton specialisation: a compile and a module load inside the capture)."""
    if capturing and _aligned(*tensors):
        graph_route = _prepared.get(_graph_key(key))
        if graph_route is not None:
            return graph_route
    return _prepared.get(key)


def _keep_with_graph_route(key, prepared: _PreparedCall, graph_route: _PreparedCall | None, device) -> None:
    """Keep ``prepared`` for ``key`` and its warmed ``graph_route``; a call prepared inside a capture
    is not kept, so the signature's first call outside one prepares again and warms its graph route."""
    if _capturing(device):
        return
    _prepared.keep(key, prepared)
    if graph_route is not None:
        _prepared.keep(_graph_key(key), graph_route)


def _prepare_dispatch(problem, input, grad_output, plan, out):
    """(the prepared call, its warmed graph route or None)."""
    _check_tensor("input", input, problem.input_shape, problem.dtype, None)
    _check_tensor("grad_output", grad_output, problem.grad_output_shape, problem.dtype, input.device)
    if out is not None:
        _check_tensor("out", out, problem.weight_size, problem.dtype, input.device)
        _check_no_self_overlap("out", out)
    if plan is not None:  # the caller's plan, whatever the launch
        if plan.problem != problem:
            raise ValueError(f"plan is for {plan.problem.describe()}, not {problem.describe()}")
        return _bind(problem, plan, input, grad_output, out), None
    plan = make_plan(problem, current_target(input.device))
    prepared = _bind(problem, plan, input, grad_output, out)
    return prepared, _warm_graph_route(problem, plan, input, grad_output, out, None)


# ----------------------------------------------------------------- the torch-like API
#: dtypes convwgrad's kernels do not compute; torch does, so conv*d_weight hands them to it.
TORCH_ONLY_DTYPES = (torch.float64,)
#: what a call handed to torch launches, as LaunchRecord reports it
TORCH_KERNELS = ("aten.convolution_backward",)


def conv_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                match_layouts: bool = False, keep_workspace: bool = True):
    """dW like ``torch.nn.grad.conv*d_weight``; the prepared-call fast path.

    Inside a CUDA-graph capture a call takes the plan for graph launches (``TargetInfo.launch``),
    which its first call outside a capture prepared and ran once (:func:`_warm_graph_route`); a
    signature never called outside a capture, or unaligned operands, keep the eager plan, whose
    Triton kernels (if any) must then already be loaded, as for any capture.

    ``match_layouts`` copies ``grad_output`` (and an input in neither layout) into the
    input's layout first, as the custom op does for the strides autograd hands it.
    ``keep_workspace=False`` allocates a two-stage call's workspace for the call alone (see
    :data:`KEPT_WORKSPACE_BYTES`): the custom op's calls.
    """
    if not is_enabled():
        return torch_weight_grad(input, weight_size, grad_output, stride, padding, dilation, groups)
    native_call = _native.call
    if native_call is not None and not _recorders:  # an open log: the Python path records the call
        grad_weight = native_call(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts,
                                  keep_workspace)
        if grad_weight is not None:
            return grad_weight
    key = _conv_weight_key(input, weight_size, grad_output, stride, padding, dilation, groups, match_layouts)
    capturing = key is not None and _capturing(key[0][3])
    prepared = None if key is None else _lookup(key, capturing, input, grad_output)
    if prepared is None:
        prepared, graph_route = _prepare_conv_weight(input, weight_size, grad_output, stride, padding, dilation,
                                                     groups, match_layouts)
        if key is not None:
            _keep_with_graph_route(key, prepared, graph_route, input.device)
    if key is not None and not capturing:  # the eager call, for the native warm path's next lookup
        _native.keep(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts, prepared,
                     prepared.aten_call)
    return prepared(input, grad_output, None, None, keep_workspace)


def prepared_conv_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """The eager prepared call a :func:`conv_weight` call with these arguments and
    ``match_layouts=True`` found or kept, or None (none kept: a signature that is validated on
    every call). For a caller that remembers it per layer and calls it as ``prepared(input,
    grad_output, out)``, checking on each call what its own key does not fix."""
    key = _conv_weight_key(input, weight_size, grad_output, stride, padding, dilation, groups, True)
    return None if key is None else _prepared.get(key)


def _conv_weight_key(input, weight_size, grad_output, stride, padding, dilation, groups, match_layouts):
    """The call signature :func:`conv_weight` keeps its prepared call under; None where it keeps
    none: not tensors (the checks say so), or an argument that is not exact ints (validated on
    every call)."""
    try:
        key = (_tensor_key(input), _tensor_key(grad_output), _exact_ints(weight_size), _exact_ints(stride),
               _exact_ints(padding), _exact_ints(dilation), _exact_ints(groups), match_layouts)
    except (AttributeError, TypeError):
        return None
    return None if None in key else key


def _record_torch_route() -> None:
    if _recorders:
        _record("aten", "aten", TORCH_KERNELS)


def _prepare_conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups, match_layouts):
    """(the prepared call, its warmed graph route or None)."""
    for name, tensor in (("input", input), ("grad_output", grad_output)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if input.dtype in TORCH_ONLY_DTYPES or (input.dim() > 0 and input.shape[0] == 0):
        # torch computes these (float64; an empty batch gives zeros): so do we, through torch
        def run(x, dy, out, workspace):  # contiguous as promised: torch's is channels_last for a grouped CL input
            return torch_weight_grad(x, weight_size, dy, stride, padding, dilation, groups).contiguous()

        return _PreparedCall(run, TORCH_KERNELS, "aten", "aten"), None
    adapt = None
    if match_layouts:
        layout = layout_of(input)
        matched = to_layout(input, layout), to_layout(grad_output, layout)
        unchanged = all(a.data_ptr() == b.data_ptr() and a.stride() == b.stride()
                        for a, b in zip(matched, (input, grad_output)))
        if not unchanged:  # decided once per signature: copy only where the layouts differ

            def adapt(x, dy):
                return to_layout(x, layout), to_layout(dy, layout)

        input, grad_output = matched
    problem = ConvProblem.from_tensors(input, weight_size, grad_output, stride, padding, dilation, groups)
    if input.device.type == "meta":  # shapes only, as the custom op's fake kernel
        return _PreparedCall(lambda x, dy, out, workspace: x.new_empty(problem.weight_size), (), "meta", "meta",
                             problem=problem), None
    plan = make_plan(problem, current_target(input.device))
    prepared = _bind(problem, plan, input, grad_output, None, adapt)
    return prepared, _warm_graph_route(problem, plan, input, grad_output, None, adapt)


def _conv_nd_weight(rank: int):
    def conv_nd_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
        if getattr(input, "dim", None) is None:
            raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
        if input.dim() != rank + 2:
            raise ValueError(
                f"conv{rank}d_weight needs a {rank + 2}-D input (N, C and {rank} spatial dims), "
                f"got shape {tuple(input.shape)}"
            )
        if torch.is_grad_enabled() and is_enabled() and (
                getattr(input, "requires_grad", False) or getattr(grad_output, "requires_grad", False)):
            _record_torch_route()  # torch's dW is differentiable (double backward); convwgrad's kernels are not
            return torch_weight_grad(input, weight_size, grad_output, stride, padding, dilation, groups).contiguous()
        return conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups)

    conv_nd_weight.__name__ = f"conv{rank}d_weight"
    conv_nd_weight.__doc__ = (
        f"dW of a {rank}-D (grouped) convolution, like ``torch.nn.grad.conv{rank}d_weight``.\n\n"
        "``padding`` may also be a sequence of (before, after) pairs for asymmetric padding. "
        "Returns dW in the input's dtype, contiguous. Where torch differs from convwgrad's kernels, "
        "the call is torch's: float64, an empty batch (zeros), and inputs that require grad with "
        "grad mode on (torch's dW is differentiable, for double backward). Meta tensors give a meta dW. "
        "Inside ``convwgrad.disabled()`` every call is torch's."
    )
    return conv_nd_weight


conv1d_weight = _conv_nd_weight(1)
conv2d_weight = _conv_nd_weight(2)
conv3d_weight = _conv_nd_weight(3)
