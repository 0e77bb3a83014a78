"""Running a plan: checks, allocation of dW and workspace, the launch hook."""

from __future__ import annotations

import contextlib
import threading

import attrs
import torch

from .manager import get_plugin_manager
from .plan import Plan, plan as make_plan
from .problem import ConvProblem, dtype_name
from .target import current_target


@attrs.frozen
class LaunchRecord:
    kernel_name: str  # the spec's name
    family: str
    kernels: tuple[str, ...]  # the kernels the family reports it launched


#: Open logs, process-wide: autograd runs a CUDA backward on its own worker thread, so a
#: thread-local log opened around ``loss.backward()`` would miss every weight gradient.
_recorders: list[list] = []
_recorders_lock = threading.Lock()


@contextlib.contextmanager
def record_launches():
    """Collect a :class:`LaunchRecord` for every dispatch, on any thread, while the block runs."""
    log: list[LaunchRecord] = []
    with _recorders_lock:
        _recorders.append(log)
    try:
        yield log
    finally:
        with _recorders_lock:
            _recorders.remove(log)


def _check_tensor(name, tensor, shape, dtype, device):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, the problem needs {tuple(shape)}")
    if dtype_name(tensor.dtype) != dtype:
        raise ValueError(f"{name} has dtype {tensor.dtype}, the problem needs {dtype}")
    if device is not None and tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, the other tensors on {device}")


def dispatch_conv_grouped(
    problem: ConvProblem,
    input: torch.Tensor,
    grad_output: torch.Tensor,
    *,
    plan: Plan | None = None,
    out: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compute dW of ``problem`` from ``input`` and ``grad_output``; return ``out``.

    ``plan`` defaults to :func:`convwgrad.plan` for the tensors' device.
    ``out`` (shape ``problem.weight_size``, the problem's dtype) is written in
    place when given. ``workspace`` (uint8, at least ``plan.workspace_nbytes``)
    is allocated when not given.
    """
    _check_tensor("input", input, problem.input_shape, problem.dtype, None)
    _check_tensor("grad_output", grad_output, problem.grad_output_shape, problem.dtype, input.device)
    target = current_target(input.device)
    if plan is None:
        plan = make_plan(problem, target)
    elif plan.problem != problem:
        raise ValueError(f"plan is for {plan.problem.describe()}, not {problem.describe()}")
    if out is None:
        out = torch.empty(problem.weight_size, dtype=input.dtype, device=input.device)
    else:
        _check_tensor("out", out, problem.weight_size, problem.dtype, input.device)
    if plan.workspace_nbytes:
        if workspace is None:
            workspace = torch.empty(plan.workspace_nbytes, dtype=torch.uint8, device=input.device)
        elif workspace.dtype != torch.uint8 or workspace.numel() < plan.workspace_nbytes or not workspace.is_contiguous():
            raise ValueError(
                f"workspace must be a contiguous uint8 tensor of >= {plan.workspace_nbytes} bytes, "
                f"got {workspace.dtype} with {workspace.numel()} elements"
            )
        elif workspace.device != input.device:
            raise ValueError(f"workspace is on {workspace.device}, the tensors on {input.device}")
    else:
        workspace = None
    launched = get_plugin_manager().hook.convwgrad_launch(
        problem=problem,
        spec=plan.spec,
        target=plan.target,
        input=input,
        grad_output=grad_output,
        out=out,
        workspace=workspace,
    )
    if launched is None:
        raise RuntimeError(f"no plugin launched family {plan.family!r} (is its plugin registered?)")
    if _recorders:
        record = LaunchRecord(plan.kernel_name, plan.family, tuple(launched))
        with _recorders_lock:
            for log in _recorders:
                log.append(record)
    return out


def _freeze(value):
    """A hashable copy of an int / sequence / nested-sequence argument."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


#: Problems kept by tensor metadata, so a training step's repeated calls skip the
#: validation (about 20 us of attrs checks); a bad call is never cached, so it raises every time.
PROBLEM_CACHE_SIZE = 4096
_problems: dict = {}


def problem_of(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1) -> ConvProblem:
    """``ConvProblem.from_tensors`` memoized on the tensors' shapes, strides, dtypes and devices."""
    try:
        key = (tuple(input.shape), input.stride(), input.dtype, input.device, tuple(grad_output.shape),
               grad_output.stride(), grad_output.dtype, grad_output.device, _freeze(weight_size),
               _freeze(stride), _freeze(padding), _freeze(dilation), groups)
        hash(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable argument: validate and report
        return ConvProblem.from_tensors(input, weight_size, grad_output, stride, padding, dilation, groups)
    problem = _problems.get(key)
    if problem is None:
        problem = ConvProblem.from_tensors(input, weight_size, grad_output, stride, padding, dilation, groups)
        if len(_problems) >= PROBLEM_CACHE_SIZE:
            _problems.clear()
        _problems[key] = problem
    return problem


def conv_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    problem = problem_of(input, weight_size, grad_output, stride, padding, dilation, groups)
    return dispatch_conv_grouped(problem, input, grad_output)


def _conv_nd_weight(rank: int):
    def conv_nd_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
        if input.dim() != rank + 2:
            raise ValueError(
                f"conv{rank}d_weight needs a {rank + 2}-D input (N, C and {rank} spatial dims), "
                f"got shape {tuple(input.shape)}"
            )
        return conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups)

    conv_nd_weight.__name__ = f"conv{rank}d_weight"
    conv_nd_weight.__doc__ = (
        f"dW of a {rank}-D (grouped) convolution, like ``torch.nn.grad.conv{rank}d_weight``.\n\n"
        "``padding`` may also be a sequence of (before, after) pairs for asymmetric padding. "
        "Returns dW in the input's dtype."
    )
    return conv_nd_weight


conv1d_weight = _conv_nd_weight(1)
conv2d_weight = _conv_nd_weight(2)
conv3d_weight = _conv_nd_weight(3)
