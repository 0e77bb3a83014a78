"""torch custom ops: ``convwgrad::conv_weight`` (the dW provider) and ``convwgrad::conv``
(a grouped convolution whose forward and input gradient are torch's own and whose weight
gradient comes from convwgrad).

Both ops have fake (meta) implementations, so ``torch.compile`` traces them without graph
breaks, and both pass ``torch.library.opcheck``. A framework backend that wants convwgrad as
its provider of grouped-conv weight gradients calls ``torch.ops.convwgrad.conv_weight``
with aten's ``convolution_backward`` conventions (symmetric padding, one int per dim).

"""

import itertools
import os
import sys
import weakref

import torch

from torch._subclasses.fake_tensor import is_fake

from convwgrad.provider import native as _native
from convwgrad.provider.dispatch import _capturing, cached_for_planning, graph_routes_apply
from convwgrad.provider.dispatch import prepared_conv_weight as _prepared_conv_weight
from convwgrad.provider.dispatch import conv_weight as _dispatch_conv_weight
from convwgrad.provider.dispatch import is_enabled as _dispatch_enabled
from convwgrad.provider.dispatch import planning_generation as _planning_generation
from convwgrad.provider.layout import layout_of
from convwgrad.provider.plan import plan
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.target import cudnn_conv_allows_tf32, current_target, launched

#: The ops are defined through ``torch.library.Library`` rather than ``torch.library.custom_op``:
#: custom_op's Python wrappers (aliasing checks, keyset redispatch) cost ~13 us a call on a
#: 2-core CPU, against ~4 us for a plain registration, and a framework backend calls
#: ``conv_weight`` for every grouped layer of every step. Both ops still have fake kernels,
#: ``conv`` an autograd formula, and both pass ``torch.library.opcheck``.
_lib = torch.library.Library("convwgrad", "DEF")
_lib.define(
    "conv_weight(Tensor input, Tensor grad_output, SymInt[] weight_size, int[] stride, int[] padding, "
    "int[] dilation, int groups) -> Tensor"
)
_lib.define(
    "conv(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
    "int groups) -> Tensor"
)


def _conv_weight_impl(input, grad_output, weight_size, stride, padding, dilation, groups):
    """dW of ``conv(input, W, stride, padding, dilation, groups)`` given dL/d(output), in the
    input's dtype; the arguments follow ``aten.convolution_backward`` (one padding per dim).
    The op's own calls allocate their workspace per call (compiled graphs, CUDA-graph trees)."""
    # autograd may hand grad_output over in any strides: the prepared call copies what is
    # not already in the input's layout (decided once per signature)
    return _dispatch_conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups,
                                 match_layouts=True, keep_workspace=False)


def _eager_conv_weight(input, grad_output, weight_size, stride, padding, dilation, groups):
    """:func:`_conv_weight_impl` for :class:`EagerConv`'s backward: outside compiled graphs, so a
    two-stage call reuses the workspace the dispatcher keeps for the thread and stream."""
    return _dispatch_conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups,
                                 match_layouts=True)


class WeightGradMemo(list):
    """Where a patched layer's route remembers its backward's prepared dW call (see
    :func:`_remembered_weight_grad`), and ``native``, the native backward's memo of the route (see
    :func:`_native_memo`: None until the first call, False where the route's backward stays Python).
    A prepared call holds launchers and compiled kernels, which neither copy nor pickle: a copied or
    saved model (EMA, SWA, checkpoints) gets an empty memo."""

    __slots__ = ("native", "__weakref__")

    def __init__(self, *items):
        super().__init__(*items)
        self.native = None

    def __reduce__(self):
        return WeightGradMemo, ()

    def __deepcopy__(self, memo):
        return WeightGradMemo()

    def __copy__(self):
        return WeightGradMemo()


def _remembered_weight_grad(memo, input, grad_output, weight, stride, padding, dilation, groups):
    """dW for :class:`EagerConv`'s backward through the prepared call ``memo`` holds, where the
    call matches the one it was prepared for; else the dispatcher's path, remembered in ``memo``.

    ``memo`` belongs to one patched layer's route (patching._ROUTE), which fixes the forward
    input's shape and device and the convolution's arguments. What a backward may still change is
    checked on every call: the saved input's dtype (autocast) and strides (a saved-tensor hook such
    as ``save_on_cpu`` may hand it back in other strides), grad_output's strides and dtype, the
    weight's strides (``model.to(memory_format=...)``), the planning generation (plugins, TF32,
    tuning file: what the dispatcher's lookup re-reads), whether convwgrad is on in the thread the
    backward runs on, and whether the stream captures a CUDA graph (whose route the dispatcher
    picks). Measured on the H200 machine inside autograd's engine thread (tools/host_parts.py,
    session 10, two runs): the dispatcher's key and lookup took 11-55 us a call over the prepared
    call it found; a staged layer's whole backward 22-83 us less. dW comes back in the weight's
    strides: allocated so where the kernels' layout allows it, rather than re-strided after."""
    signature = (input.dtype, input.stride(), grad_output.stride(), grad_output.dtype, weight.stride(),
                 _planning_generation())
    if memo and memo[0] == signature and _dispatch_enabled() and not _capturing(input.device):
        out = None if memo[2] is None else torch.empty_strided(memo[2], weight.stride(), dtype=input.dtype,
                                                                device=input.device)
        return memo[1](input, grad_output, out)
    weight_size = list(weight.shape)
    grad_weight = _eager_conv_weight(input, grad_output, weight_size, stride, padding, dilation, groups)
    prepared = _prepared_conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups)
    if prepared is not None:
        same = grad_weight.is_contiguous() and _same_but_unit_dims(weight, grad_weight)
        memo[:] = (signature, prepared, weight.shape if same else None)
    return grad_weight


#: Whether a routed layer's eager call takes the native backward (``provider/native``: a C++ autograd
#: function launching dW's kernels without Python) once the extension is loaded; False:
#: :class:`EagerConv`'s Python backward. Read on every call, so tools flip it to time both in one process.
#: Off unless ``CONVWGRAD_NATIVE_BACKWARD=1`` until its GPU launches have run on a GPU
#: (tests/frameworks/test_native_backward_gpu.py; written in session 22, which got no device machine):
#: an unmeasured, GPU-untested path stays opt-in.
native_backward = os.environ.get("CONVWGRAD_NATIVE_BACKWARD", "0").strip() == "1"
#: the routes' memos by the key their native memo calls the fallback with; a route that is gone is gone here
_native_routes: "weakref.WeakValueDictionary[int, WeightGradMemo]" = weakref.WeakValueDictionary()
_native_keys = itertools.count(1)


def _native_memo(memo: WeightGradMemo):
    """``memo``'s native memo (a capsule of ``provider/native``), made on first use; None while the
    extension is not loaded (the route's layer then runs :class:`EagerConv`)."""
    key = next(_native_keys)
    capsule = _native.new_memo(key)
    if capsule is not None:
        _native_routes[key] = memo
        memo.native = capsule
    return capsule


def _native_backward_fallback(key, input, grad_output, weight, stride, padding, dilation, groups):
    """dW for a routed layer's native backward that could not launch it (a first call, a capture, an
    open record_launches log, another signature, unaligned operands): :class:`EagerConv`'s path. Then,
    outside a capture, the prepared call's launches go into the route's native memo for the next
    backward; where its family tells none (or the call copies operands first) the route's layer runs
    EagerConv from its next call on."""
    memo = _native_routes.get(key)
    if memo is None:  # its route was replaced: the dispatcher's path
        return _plain_weight_grad(input, grad_output, weight, stride, padding, dilation, groups)
    grad_weight = _remembered_weight_grad(memo, input, grad_output, weight, stride, padding, dilation, groups)
    prepared = memo[1] if memo else None
    if prepared is not None and memo.native and input.is_cuda and not _capturing(input.device):
        launches = prepared.native_launches()
        if launches is not None:
            _native.install(memo.native, input, grad_output, weight, *launches)
        elif prepared.native is None or prepared.adapt is not None:
            memo.native = False  # nothing to launch natively for this route, ever: EagerConv from now on
    return grad_weight


_native.backward_fallback = _native_backward_fallback


def _same_but_unit_dims(weight, grad_weight) -> bool:
    """Whether the weight's strides and dW's agree on every dim longer than 1 (they address the same
    elements: a depthwise (C, 1, k, k) weight in channels_last against a contiguous dW)."""
    return all(a == b for size, a, b in zip(weight.shape, weight.stride(), grad_weight.stride()) if size > 1)


def _conv_weight_fake(input, grad_output, weight_size, stride, padding, dilation, groups):
    return input.new_empty(weight_size)


def _aten_conv(input, weight, bias, stride, padding, dilation, groups):
    return torch.ops.aten.convolution.default(
        input, weight, bias, stride, padding, dilation, False, [0] * len(stride), groups
    )


_lib.impl("conv_weight", _conv_weight_impl, "CompositeExplicitAutograd")
_lib.impl("conv", _aten_conv, "CompositeExplicitAutograd")
torch.library.register_fake("convwgrad::conv_weight", _conv_weight_fake, lib=_lib)


def _conv_fake(input, weight, bias, stride, padding, dilation, groups):
    """The op's fake kernel: torch.compile runs it while tracing, which is when inductor's pass
    that lowers the op's forward is put in place (see :func:`_lower_forward_in_inductor`)."""
    _lower_forward_in_inductor()
    return _aten_conv(input, weight, bias, stride, padding, dilation, groups)


torch.library.register_fake("convwgrad::conv", _conv_fake, lib=_lib)

#: the dW provider a framework backend calls where it would call cuDNN's weight gradient
conv_weight = torch.ops.convwgrad.conv_weight.default
#: torch's own convolution; its registered backward takes dW from ``conv_weight``
conv = torch.ops.convwgrad.conv.default


_NOT_A_PROBLEM = object()


def _layer_problem(input, weight, stride, padding, dilation, groups):
    try:
        return ConvProblem.build(
            batch=input.shape[0], groups=groups, in_channels=input.shape[1], out_channels=weight.shape[0],
            input_size=tuple(input.shape[2:]), filter_size=tuple(weight.shape[2:]), stride=tuple(stride),
            padding=tuple(padding), dilation=tuple(dilation), dtype=input.dtype, layout=layout_of(input),
        )
    except ValueError:
        return _NOT_A_PROBLEM


def planned_for_torch(input, weight, stride, padding, dilation, groups, *, graph_launches=False) -> bool:
    """Whether plan() gives this layer's dW to torch's own kernel (the aten family), for eager
    launches, and with ``graph_launches`` for launches from CUDA graphs too (where the dispatcher
    replans them); a layer that is no problem convwgrad poses is torch's."""
    problem = _layer_problem(input, weight, stride, padding, dilation, groups)
    if problem is _NOT_A_PROBLEM:
        return True  # not a problem convwgrad poses: torch's own call (and its own error, if any)
    target = current_target(input.device)
    targets = (target, launched(target, "graph")) if graph_launches and graph_routes_apply(target) else (target,)
    return all(plan(problem, each).family == "aten" for each in targets)


def _graph_launches_possible(input) -> bool:
    """Whether the op's backward may be launched from a CUDA graph: traced (on fake tensors, as
    AOTAutograd traces it for torch.compile), only where inductor's CUDA graphs are on
    (``mode="reduce-overhead"``, which sets ``triton.cudagraphs`` while it traces); called eagerly,
    always (the caller may capture it). Fake tensors tell a trace, not ``torch.compiler.is_compiling()``:
    torch 2.11 (the H200 machine's) sets that flag only for torch.export, so it reads False here.
    A graph compiled otherwise and then captured by hand (``torch.cuda.graph`` around a default-mode
    step, ``backend="cudagraphs"``) keeps the eager plan's layers stock: the same gradients, without
    the graph route's kernels."""
    if not is_fake(input):
        return True
    config = sys.modules.get("torch._inductor.config")
    return bool(config is not None and config.triton.cudagraphs)


def _stock_backward(input, weight, stride, padding, dilation, groups) -> bool:
    """Whether the op's backward is stock torch's whole ``convolution_backward`` (dX, dW and the bias
    gradient in one call): where plan() gives dW to torch for every launch the backward may get.
    torch.compile traces this backward with fake tensors, so a compiled graph holds the stock call
    rather than dX plus the opaque dW op, which a compiled step paid on every layer (H200,
    ConvNeXt-T N=64 channels_last, all 18 layers planned for torch, torch.compile's default mode:
    0.88-0.95x stock; the op's calls 0.815 ms a step under torch.profiler; session 10). Shapes that
    are symbolic (dynamic shapes) cannot be planned while tracing: the op decides on every call."""
    if any(isinstance(v, torch.SymInt) for v in (*input.shape, *input.stride(), *weight.shape)):
        return False
    graph_launches = _graph_launches_possible(input)
    key = ("stock op backward", tuple(input.shape), input.stride(), input.dtype, input.device, tuple(weight.shape),
           tuple(stride), tuple(padding), tuple(dilation), groups, graph_launches)
    return cached_for_planning(key, lambda: planned_for_torch(input, weight, stride, padding, dilation, groups,
                                                              graph_launches=graph_launches))


def _lower_forward_in_inductor() -> None:
    """Put a :func:`_forward_lowering` pass among inductor's post-grad passes, if it is not there.

    The op exists in a compiled graph only to carry convwgrad's backward; once AOTAutograd has
    split the forward from the backward, the forward's op is exactly ``aten.convolution``. Left as
    the op, inductor calls it through the dispatcher and its Python implementation on every layer
    and step (0.57 ms of host time a ConvNeXt-T step, 18 layers, H200, torch.profiler, session
    10), and cannot plan its layout; rewritten, inductor lowers it as a stock convolution.

    Called from the op's fake kernel, whenever torch.compile traces the op, so only programs that
    trace it import inductor's config, and a pass list a ``config.patch`` restored is filled again.
    Where inductor takes a list of passes (torch >= 2.12) the pass goes first, beside the user's;
    where it takes one pass (torch 2.11, the H200 machine's), only into an empty slot: a user's own
    pass is left alone and the forward stays the op (slower, the same result)."""
    try:
        from torch._inductor import config
        from torch._inductor import custom_graph_pass
    except ImportError:  # a torch without inductor: nothing to lower
        return
    current = config.post_grad_custom_post_pass
    takes_lists = hasattr(custom_graph_pass, "get_custom_graph_passes")
    passes = (custom_graph_pass.get_custom_graph_passes(current) if takes_lists
              else () if current is None else (current,))
    if any(getattr(each, "convwgrad_forward", False) for each in passes):
        return
    if takes_lists:
        config.post_grad_custom_post_pass = [_forward_lowering(custom_graph_pass.CustomGraphPass), *passes]
    elif current is None:
        config.post_grad_custom_post_pass = _forward_lowering(custom_graph_pass.CustomGraphPass)


def _forward_lowering(base):
    """An inductor post-grad pass (a ``base``, inductor's CustomGraphPass): each ``convwgrad.conv``
    node becomes ``aten.convolution`` with the same operands (not transposed, no output padding).

    Its uuid, part of inductor's FX graph and AOTAutograd cache keys, also stands for what the
    traced graphs depend on besides their source: this file and the routing rules (the compiled
    backward is stock's where plan() gives dW to torch, see :func:`_stock_backward`) and the
    planning state another process may not share (plugins, TF32, the planning environment)."""

    class ConvForwardToAten(base):
        convwgrad_forward = True

        def __call__(self, graph):
            _rewrite_conv_nodes(graph)

        def uuid(self):
            from importlib.util import find_spec

            from torch._inductor.custom_graph_pass import get_hash_for_files

            routing = find_spec("convwgrad.selectors.routing").origin  # its file, not an import of the layer
            sources = get_hash_for_files((__file__, routing))
            return (sources.hex(), _planning_fingerprint())

    return ConvForwardToAten()


def _planning_fingerprint() -> str:
    """What plan() reads besides the problem, as a string another process can compare: the
    registered plugins by name, torch's TF32 switches and the planning environment variables."""
    from convwgrad.provider.manager import get_plugin_manager
    from convwgrad.provider.plan import PLANNING_ENVIRONMENT

    plugins = sorted(name for name, _ in get_plugin_manager().list_name_plugin())
    environment = [(name, os.environ.get(name)) for name in PLANNING_ENVIRONMENT]
    return repr((plugins, cudnn_conv_allows_tf32(), torch.backends.cuda.matmul.fp32_precision
                 if hasattr(torch.backends.cuda.matmul, "fp32_precision") else torch.backends.cuda.matmul.allow_tf32,
                 environment))


def _rewrite_conv_nodes(graph) -> None:
    """Rewrite every ``convwgrad.conv`` call of ``graph`` as ``aten.convolution``."""
    from torch.fx.operator_schemas import normalize_function

    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not conv:
            continue
        arguments = normalize_function(conv, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
        stride = arguments["stride"]
        node.target = torch.ops.aten.convolution.default
        node.args = (arguments["input"], arguments["weight"], arguments["bias"], stride, arguments["padding"],
                     arguments["dilation"], False, [0] * len(stride), arguments["groups"])
        node.kwargs = {}


def _in_layout_of(weight, grad_weight):
    """dW with the weight's strides, as stock torch hands it back: DDP lays its buckets out like the
    parameters and warns otherwise. A depthwise (C, 1, k, k) weight in channels_last differs from
    contiguous only in the stride of its size-1 dim, so it is re-strided without a copy."""
    if _same_but_unit_dims(weight, grad_weight):
        return grad_weight.as_strided(weight.shape, weight.stride())
    return torch.empty_like(weight, dtype=grad_weight.dtype).copy_(grad_weight)


def _conv_setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(input, weight)
    ctx.arguments = (stride, padding, dilation, groups, bias is not None)


def _conv_backward(ctx, grad_output, weight_grad=conv_weight):
    """dX and the bias gradient from torch, dW from ``weight_grad``: the op, or in eager mode the
    dispatcher-free call behind it, ``weight_grad(input, grad_output, weight, stride, padding,
    dilation, groups)`` (see :class:`EagerConv`)."""
    input, weight = ctx.saved_tensors
    stride, padding, dilation, groups, has_bias = ctx.arguments
    wants_input, wants_weight, wants_bias = ctx.needs_input_grad[:3]
    grad_input = grad_weight = grad_bias = None
    if weight_grad is conv_weight and wants_weight and _stock_backward(input, weight, stride, padding, dilation,
                                                                       groups):
        grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward.default(
            grad_output, input, weight, [weight.shape[0]] if has_bias else None, stride, padding, dilation,
            False, [0] * len(stride), groups, [wants_input, True, has_bias and wants_bias],
        )
        return grad_input, grad_weight, grad_bias, None, None, None, None
    if wants_input or (has_bias and wants_bias):
        grad_input, _, grad_bias = torch.ops.aten.convolution_backward.default(
            grad_output, input, weight, [weight.shape[0]] if has_bias else None, stride, padding, dilation,
            False, [0] * len(stride), groups, [wants_input, False, has_bias and wants_bias],
        )
    if wants_weight:
        if weight_grad is conv_weight:
            grad_weight = conv_weight(input, grad_output, list(weight.shape), stride, padding, dilation, groups)
        else:
            grad_weight = weight_grad(input, grad_output, weight, stride, padding, dilation, groups)
        if grad_weight.stride() != weight.stride():
            grad_weight = _in_layout_of(weight, grad_weight)
    return grad_input, grad_weight, grad_bias, None, None, None, None


torch.library.register_autograd("convwgrad::conv", _conv_backward, setup_context=_conv_setup_context, lib=_lib)


class EagerConv(torch.autograd.Function):
    """``convwgrad::conv`` as a plain autograd.Function, for eager calls: the same forward (torch's
    convolution) and the same backward, without the custom op's dispatcher and Python autograd
    wrappers around it. Measured on a 2-core CPU with dW stubbed out: a patched depthwise layer's
    forward + backward cost ~180 us of host time over the stock layer through the op (see
    notes/PERF.md); a model with 75 such layers (UniRepLKNet-T) is host-bound on the H200
    machine, so that cost is the step's. Under ``torch.compile`` the op is used (it traces)."""

    @staticmethod
    def forward(ctx, input, weight, bias, stride, padding, dilation, groups, memo=None):
        _conv_setup_context(ctx, (input, weight, bias, stride, padding, dilation, groups), None)
        ctx.memo = memo  # a patched layer's, kept with its route: see _remembered_weight_grad
        # aten::convolution through torch's native binding: the same dispatcher call as
        # _aten_conv's torch.ops one, ~4.5 us less Python on a 2-core CPU (the op's boxed call)
        return torch.convolution(input, weight, bias, stride, padding, dilation, False, [0] * len(stride), groups)

    @staticmethod
    def backward(ctx, grad_output):
        memo = ctx.memo
        if memo is None:
            weight_grad = _plain_weight_grad
        else:
            def weight_grad(*arguments):
                return _remembered_weight_grad(memo, *arguments)

        return (*_conv_backward(ctx, grad_output, weight_grad), None)


def _plain_weight_grad(input, grad_output, weight, stride, padding, dilation, groups):
    return _eager_conv_weight(input, grad_output, list(weight.shape), stride, padding, dilation, groups)


#: autograd's C++ apply of :class:`EagerConv`, without ``Function.apply``'s Python wrapper (default
#: argument binding, functorch's dead-wrapper unwrapping: ~3 us a call on a 2-core CPU, a third
#: of a Function's cost there); used when no functorch transform is active, as that wrapper does
_apply_eager_conv = super(torch.autograd.Function, EagerConv).apply


def eager_conv(input, weight, bias, stride, padding, dilation, groups, memo=None):
    """What ``conv`` computes, through :class:`EagerConv`; the op itself while compiling, with the
    bias added outside it. ``memo``: a list a patched layer keeps with its route, where the
    backward remembers its prepared dW call (see :func:`_remembered_weight_grad`); None: none.

    Inside the op a bias is aten's own add, an eager elementwise kernel over the whole output that
    inductor cannot fuse; inductor's lowering of a stock convolution adds the bias in the fused
    kernel that follows. Measured on the H200 (tools/step_bench.py --compile --profile, ConvNeXt-T
    N=64 channels_last, session 9): 18 such adds, 0.36 ms of a 17.8 ms step, more than the staged
    family's dW saved there."""
    if torch.compiler.is_compiling():
        if bias is None or bias.shape != weight.shape[:1] or bias.dtype != input.dtype:
            return conv(input, weight, bias, stride, padding, dilation, groups)  # torch's own checks and errors
        output = conv(input, weight, None, stride, padding, dilation, groups)
        return output + bias.view(1, -1, *([1] * (output.dim() - 2)))
    if torch._C._are_functorch_transforms_active():  # vmap, grad, ...: Function.apply's own path
        return EagerConv.apply(input, weight, bias, stride, padding, dilation, groups)
    if memo is not None and native_backward:
        native = memo.native
        if native is None:
            native = _native_memo(memo)
        # a TorchFunctionMode sees EagerConv's torch calls; the C++ function's it would not
        if native and not torch._C._is_torch_function_mode_enabled():
            output = _native.conv(input, weight, bias, stride, padding, dilation, groups, native)
            if output is not None:  # None: a tensor subclass
                return output
    return _apply_eager_conv(input, weight, bias, stride, padding, dilation, groups, memo)
