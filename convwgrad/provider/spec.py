"""Kernel specs (what to compile and launch) and support verdicts (whether it may)."""

from __future__ import annotations

import enum
import math

import attrs
from attrs import field
from attrs.validators import instance_of

from .problem import DTYPES, _positive_int, one_of


def cdiv(a: int, b: int) -> int:
    """Host-side ceil division (triton.cdiv is a constexpr function, ~5 us a call from Python)."""
    return -(-a // b)


def pow2_at_least(value: int, floor: int = 1) -> int:
    """The smallest power of two >= ``value`` and >= ``floor`` (a power of two)."""
    size = floor
    while size < value:
        size *= 2
    return size


def pow2_nearest(wanted: float, limit: int | None = None, down: bool = False) -> int:
    """The power of two nearest ``wanted`` by ratio (``down``: the largest not above it), at least 1 and,
    with ``limit``, at most the largest power of two not above ``limit``: the families' split policies."""
    exponent = math.log2(wanted) if wanted > 1 else 0.0
    size = 2 ** (math.floor(exponent) if down else math.floor(exponent + 0.5))
    while limit is not None and size > max(1, limit):
        size //= 2
    return size


#: tl.dot needs every tile dim >= 16 on all targets.
MIN_DOT_BLOCK = 16
BLOCK_DIMS = ("block_m", "block_n", "block_k")


def block_size_reasons(tile: "Tile", max_blocks: tuple[int, int, int], min_block: int = MIN_DOT_BLOCK, *,
                       powers_of_two: bool = True) -> list[str]:
    """Why ``tile``'s (block_m, block_n, block_k) fall outside ``[min_block, max_blocks]``, or are
    not powers of two where the family's kernel needs them so (``tl.arange`` blocks); [] when
    inside. Every tiled family checks its own bounds here: a pinned or tuned tile past the sizes
    its kernel is built for must be refused with a reason, not fail at launch."""
    sizes = [(name, getattr(tile, name)) for name in BLOCK_DIMS]
    reasons = []
    if powers_of_two:
        odd = [f"{name}={size}" for name, size in sizes if size & (size - 1)]
        if odd:
            reasons.append(f"the family's blocks are tl.arange ranges, powers of two: {', '.join(odd)}")
    small = [f"{name}={size}" for name, size in sizes if size < min_block]
    if small:
        reasons.append(f"tl.dot needs tile dims >= {min_block}: {', '.join(small)}")
    reasons += [f"{name}={size} exceeds the family's largest {name} {limit}"
                for (name, size), limit in zip(sizes, max_blocks) if size > limit]
    return reasons


def _power_of_two(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1):
        raise ValueError(f"{attribute.name} must be a power of two, got {value!r}")


@attrs.frozen(kw_only=True, cache_hash=True)
class Tile:
    """The block shape of a Triton kernel and its launch options. block_n and block_k may be any
    positive int: the families whose kernels take them as ``tl.arange`` ranges refuse other than
    powers of two (:func:`block_size_reasons`); the staged family unrolls them (a 14-column strip)."""

    block_m: int = field(validator=_power_of_two)  # rows of dW (output channels in a group)
    block_n: int = field(validator=_positive_int)  # columns of dW (filter taps x input channels)
    block_k: int = field(validator=_positive_int)  # reduction step over N*Do*Ho*Wo
    num_warps: int = field(default=4, validator=_power_of_two)
    num_stages: int = field(default=2, validator=_positive_int)

    @property
    def name(self) -> str:
        return f"m{self.block_m}n{self.block_n}k{self.block_k}w{self.num_warps}s{self.num_stages}"


@attrs.frozen(kw_only=True, cache_hash=True)
class KernelSpec:
    """One configuration of one kernel family.

    Every field changes what runs, so :meth:`kernel_name` encodes all of them
    and a cache keyed by name never hands one variant another's binary.
    """

    family: str = field(validator=instance_of(str))
    dtype: str = field(validator=one_of(DTYPES))
    tile: Tile | None = field(default=None, validator=attrs.validators.optional(instance_of(Tile)))
    split_k: int = field(default=1, validator=_positive_int)
    #: adjacent depthwise groups one program computes; families gate which degrees they run
    group_merge: int = field(default=1, validator=_positive_int)
    #: fp32 only: let the matrix units round operands to TF32, as cuDNN does when
    #: ``torch.backends.cudnn.allow_tf32`` is set.
    allow_tf32: bool = field(default=False, validator=instance_of(bool))
    #: 64-bit element offsets, needed once an operand reaches offset 2**31 through its shape or
    #: its strides (ConvProblem.needs_wide_index).
    wide_index: bool = field(default=False, validator=instance_of(bool))

    @property
    def two_stage(self) -> bool:
        """split_k > 1 writes fp32 partials to a workspace, then reduces them in a second kernel."""
        return self.split_k > 1

    def kernel_name(self) -> str:
        parts = [self.family, self.dtype]
        if self.tile is not None:
            parts.append(self.tile.name)
        parts.append(f"spk{self.split_k}")
        parts.append("2stage" if self.two_stage else "1stage")
        if self.group_merge > 1:
            parts.append(f"gm{self.group_merge}")
        if self.allow_tf32:
            parts.append("tf32")
        if self.wide_index:
            parts.append("i64")
        return "_".join(parts)


def spec_from_dict(data: dict) -> KernelSpec:
    """The KernelSpec that ``attrs.asdict(spec)`` wrote (results files, tuning caches)."""
    tile = data.get("tile")
    return KernelSpec(**{**data, "tile": Tile(**tile) if tile else None})


@attrs.frozen
class Verdict:
    """A family's answer to "can this spec run this problem on this target?".

    Falsy when refused; a refusal always carries at least one reason.
    """

    reasons: tuple[str, ...] = ()
    #: for an admission: anything the caller should know (explain() prints it)
    note: str = ""

    @classmethod
    def admit(cls, note: str = "") -> "Verdict":
        return cls((), note)

    @classmethod
    def refuse(cls, *reasons: str) -> "Verdict":
        if not reasons:
            raise ValueError("a refusal needs at least one reason")
        return cls(tuple(reasons))

    @classmethod
    def from_reasons(cls, reasons) -> "Verdict":
        return cls(tuple(reasons))

    @property
    def admitted(self) -> bool:
        return not self.reasons

    def __bool__(self) -> bool:
        return self.admitted

    def __str__(self) -> str:
        return "admitted" + self.note if self.admitted else "refused: " + "; ".join(self.reasons)


@attrs.frozen
class BoundLaunch:
    """A launch bound to one call signature (see the ``convwgrad_prepare_launch`` hook)."""

    #: ``run(input, grad_output, out, workspace) -> dW``; ``out`` may be None
    run: object
    #: the kernels ``run`` launches, by name (what :func:`convwgrad.record_launches` reports)
    kernels: tuple
    #: where ``run`` is exactly torch's dW in one ``aten.convolution_backward`` call (a zero-stride
    #: weight stand-in, no graph, a contiguous result; ``blocks/aten.py``): its (weight_size, stride,
    #: padding, dilation, groups), symmetric padding. The native warm path then makes that call itself.
    aten_call: tuple | None = None
    #: ``() -> stages | None``: ``run``'s kernel launches for a routed layer's native backward
    #: (``provider/native``), once ``run`` has run (compiled, loaded); None where they cannot be told.
    #: ``stages``: a tuple per stage, in launch order, of the launches it may take (the first whose
    #: alignments the operands' pointers meet), each ``(function handle, grid, block, shared bytes,
    #: input alignment, grad_output alignment, params)``; ``params``: ``(LaunchOperand, nbytes, value)``
    #: per kernel parameter, in order (the value of a LITERAL; an operand's pointer is the call's).
    native: object = None


class LaunchOperand(enum.IntEnum):
    """Where a kernel parameter of a :attr:`BoundLaunch.native` launch comes from (``warm_path.cpp``'s
    ParamSource): a literal, or the data pointer of the call's input, grad_output, workspace (the
    fp32 partials) or dW."""

    LITERAL = 0
    INPUT = 1
    GRAD_OUTPUT = 2
    WORKSPACE = 3
    OUT = 4
