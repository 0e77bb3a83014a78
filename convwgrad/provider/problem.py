"""The problem: one grouped-convolution weight gradient, described by value.

A :class:`ConvProblem` is frozen and hashable, so it can key a plan cache.
Every spatial quantity is a tuple with one entry per spatial dimension
(1, 2 or 3 of them, outermost first: depth, height, width).
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import attrs
from attrs import field

#: Supported element types, by the short names the CLI and kernel names use.
DTYPES = ("fp16", "bf16", "fp32")
#: Memory layouts of the activations (input and grad_output).
LAYOUTS = ("contiguous", "channels_last")

#: Element offsets at or past this do not fit 32-bit index arithmetic: a kernel reaching
#: them must index in 64 bits (KernelSpec.wide_index).
INT32_OFFSET_LIMIT = 2**31

_TORCH_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _positive_int(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _bool(instance, attribute, value):
    if not isinstance(value, bool):
        raise ValueError(f"{attribute.name} must be a bool, got {value!r}")


def one_of(choices: tuple[str, ...]):
    """Validator: the value is one of ``choices``; the error names the field, the value and the choices."""
    def check(instance, attribute, value):
        if value not in choices:
            raise ValueError(
                f"{attribute.name} {value!r} is not supported; supported {attribute.name}s: {', '.join(choices)}"
            )

    return check


def _int_tuple(minimum: int):
    def check(instance, attribute, value):
        if not isinstance(value, tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ValueError(f"{attribute.name} must be a tuple of ints, got {value!r}")
        if not 1 <= len(value) <= 3:
            raise ValueError(
                f"{attribute.name} must have 1, 2 or 3 spatial dims, got {len(value)}: {value!r}"
            )
        bad = [v for v in value if v < minimum]
        if bad:
            raise ValueError(f"{attribute.name} entries must be >= {minimum}, got {value!r}")

    return check


def _padding_pairs(instance, attribute, value):
    if not isinstance(value, tuple) or not all(
        isinstance(p, tuple) and len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in p)
        for p in value
    ):
        raise ValueError(f"padding must be a tuple of (before, after) int pairs, got {value!r}")
    if any(v < 0 for p in value for v in p):
        raise ValueError(f"padding must be >= 0 on every side, got {value!r}")


def dtype_name(dtype: Any) -> str:
    """Short dtype name ('bf16', ...) of a torch dtype or of a short name; ValueError if unsupported."""
    name = str(dtype).removeprefix("torch.")
    name = _TORCH_DTYPE_NAMES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; supported dtypes: {', '.join(DTYPES)}")
    return name


def _int_or_none(value) -> int | None:
    """``value`` as an int when it is an integer (int, numpy or 0-d torch integer); None for
    anything else, floats and bools included: ``stride=2.0`` or ``True`` is a mistake, not a 2 or a 1."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _as_int(name: str, value, what: str = "an int") -> int:
    number = _int_or_none(value)
    if number is None:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return number


def _ints_or_none(value) -> tuple[int, ...] | None:
    """``value`` as a tuple of ints when it is a sequence of integers (see _int_or_none), else None."""
    if isinstance(value, str):
        return None
    try:
        numbers = tuple(map(_int_or_none, value))
    except TypeError:  # not iterable
        return None
    return None if None in numbers else numbers


def _int_sequence(name: str, value, what: str) -> tuple[int, ...]:
    """``value`` (a sequence of integers) as a tuple of ints; ValueError naming ``name`` otherwise."""
    numbers = _ints_or_none(value)
    if numbers is None:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return numbers


def _spatial(name: str, value: int | Sequence[int], rank: int, what: str | None = None) -> tuple[int, ...]:
    """One int per spatial dim from an int or a sequence; ``what`` describes what is accepted."""
    number = _int_or_none(value)
    if number is not None:
        return (number,) * rank
    value = _int_sequence(name, value, what or f"an int or a sequence of {rank} ints (one per spatial dim)")
    if len(value) == 1 and rank > 1:
        return value * rank
    if len(value) != rank:
        raise ValueError(f"{name} {value!r} has {len(value)} entries, expected {rank} (one per spatial dim)")
    return value


def _padding(value, rank: int) -> tuple[tuple[int, int], ...]:
    """Accept p, (p_d, p_h, p_w) or ((lo, hi), ...) and return per-side pairs."""
    if isinstance(value, str):
        raise ValueError(f"padding {value!r}: string padding is not supported, give ints")
    expected = f"an int, a sequence of {rank} ints (one per spatial dim) or of (before, after) int pairs"
    number = _int_or_none(value)
    if number is not None:
        return ((number, number),) * rank
    try:
        items = tuple(value)
    except TypeError:
        raise ValueError(f"padding must be {expected}, got {value!r}") from None
    if items and all(isinstance(v, (tuple, list)) for v in items):
        pairs = tuple(map(_ints_or_none, items))
        if None in pairs:
            raise ValueError(f"padding must be {expected}, got {value!r}")
        if len(pairs) != rank:
            raise ValueError(f"padding {value!r} has {len(pairs)} pairs, expected {rank}")
        return pairs  # a pair of other than two entries is refused, naming padding, by the constructor
    return tuple((p, p) for p in _spatial("padding", items, rank, expected))


@attrs.frozen(kw_only=True, cache_hash=True)
class ConvProblem:
    """dW of ``y = conv(x, w, groups)`` given ``x`` and ``dy``; sizes only, no tensors.

    The per-group GEMM view: ``M = kpg`` rows of dW, ``N_gemm = Z*Y*X*cpg``
    columns, reduced over ``K_gemm = N*Do*Ho*Wo``.
    """

    batch: int = field(validator=_positive_int)
    groups: int = field(validator=_positive_int)
    in_channels: int = field(validator=_positive_int)
    out_channels: int = field(validator=_positive_int)
    input_size: tuple[int, ...] = field(validator=_int_tuple(1))
    filter_size: tuple[int, ...] = field(validator=_int_tuple(1))
    stride: tuple[int, ...] = field(validator=_int_tuple(1))
    padding: tuple[tuple[int, int], ...] = field(validator=_padding_pairs)
    dilation: tuple[int, ...] = field(validator=_int_tuple(1))
    dtype: str = field(validator=one_of(DTYPES))
    layout: str = field(default="contiguous", validator=one_of(LAYOUTS))
    #: An operand is a strided view whose offsets reach INT32_OFFSET_LIMIT although the shapes
    #: do not (``x[:, :, ::4]`` of a 2**32-element tensor holds 2**30 elements but reaches past
    #: 2**31): from_tensors reads it off the strides. build() sees no tensors and leaves it False,
    #: as from_tensors does wherever the shapes alone decide, so equal shapes pose equal problems.
    wide_strides: bool = field(default=False, validator=_bool)

    def __attrs_post_init__(self):
        rank = len(self.input_size)
        for name in ("filter_size", "stride", "padding", "dilation"):
            value = getattr(self, name)
            if len(value) != rank:
                raise ValueError(
                    f"{name} {value!r} has {len(value)} spatial dims but input_size "
                    f"{self.input_size!r} has {rank}"
                )
        if self.in_channels % self.groups:
            raise ValueError(
                f"in_channels={self.in_channels} is not divisible by groups={self.groups}"
            )
        if self.out_channels % self.groups:
            raise ValueError(
                f"out_channels={self.out_channels} is not divisible by groups={self.groups}"
            )
        out = self.output_size
        if min(out) < 1:
            raise ValueError(
                f"output size {out} < 1: input_size={self.input_size}, filter_size="
                f"{self.filter_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}"
            )

    @classmethod
    def build(
        cls,
        *,
        batch: int,
        groups: int,
        in_channels: int,
        out_channels: int | None = None,
        input_size: Sequence[int],
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: Any = 0,
        dilation: int | Sequence[int] = 1,
        dtype: Any = "bf16",
        layout: str = "contiguous",
    ) -> "ConvProblem":
        """Like the constructor, but scalars broadcast over the spatial dims, any integer type
        stands for an int (never a float or a bool), and ``dtype`` may be a torch dtype."""
        input_size = _int_sequence("input_size", input_size, "a sequence of ints (one per spatial dim)")
        rank = len(input_size)
        count = "a positive int"
        return cls(
            batch=_as_int("batch", batch, count),
            groups=_as_int("groups", groups, count),
            in_channels=_as_int("in_channels", in_channels, count),
            out_channels=_as_int("out_channels", in_channels if out_channels is None else out_channels, count),
            input_size=input_size,
            filter_size=_spatial("filter_size", filter_size, rank),
            stride=_spatial("stride", stride, rank),
            padding=_padding(padding, rank),
            dilation=_spatial("dilation", dilation, rank),
            dtype=dtype_name(dtype),
            layout=layout,
        )

    @classmethod
    def from_tensors(
        cls,
        input,
        weight_size: Sequence[int],
        grad_output,
        stride: int | Sequence[int] = 1,
        padding: Any = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
    ) -> "ConvProblem":
        """The problem of ``torch.nn.grad.convNd_weight(input, weight_size, grad_output, ...)``."""
        _check_is_tensor("input", input)
        _check_is_tensor("grad_output", grad_output)
        if input.dim() not in (3, 4, 5):
            raise ValueError(
                f"input must be 3-D, 4-D or 5-D (N, C, *spatial), got shape {tuple(input.shape)}"
            )
        weight_size = _int_sequence("weight_size", weight_size, "a sequence of ints (out_channels, cpg, *filter)")
        if len(weight_size) != input.dim():
            raise ValueError(
                f"weight_size {weight_size} has {len(weight_size)} dims, input has {input.dim()}"
            )
        if grad_output.dim() != input.dim():
            raise ValueError(
                f"grad_output has {grad_output.dim()} dims, input has {input.dim()}: "
                f"{tuple(grad_output.shape)} vs {tuple(input.shape)}"
            )
        if input.dtype != grad_output.dtype:
            raise ValueError(f"dtype mismatch: input is {input.dtype}, grad_output is {grad_output.dtype}")
        if input.device != grad_output.device:
            raise ValueError(
                f"device mismatch: input is on {input.device}, grad_output is on {grad_output.device}"
            )
        groups = _as_int("groups", groups, "a positive int")
        if groups < 1:
            raise ValueError(f"groups must be a positive int, got {groups!r}")
        batch, in_channels, *spatial = input.shape
        out_channels, cpg, *filter_size = weight_size
        if cpg * groups != in_channels:
            raise ValueError(
                f"weight_size {weight_size} has {cpg} input channels per group, but input has "
                f"{in_channels} channels and groups={groups} (expected {in_channels} / {groups})"
            )
        rank = len(spatial)
        problem = cls.build(
            batch=batch,
            groups=groups,
            in_channels=in_channels,
            out_channels=out_channels,
            input_size=spatial,
            filter_size=tuple(filter_size),
            stride=stride,
            padding=padding,
            dilation=dilation,
            dtype=input.dtype,
            layout=_layout_of(input),
        )
        expected = (batch, out_channels, *problem.output_size)
        if tuple(grad_output.shape) != expected:
            raise ValueError(
                f"grad_output shape {tuple(grad_output.shape)} does not match the convolution's "
                f"output {expected} (input {tuple(input.shape)}, weight_size {weight_size}, "
                f"stride={problem.stride}, padding={problem.padding}, dilation={problem.dilation})"
            )
        assert rank == problem.spatial_dims
        if not problem.needs_wide_index and max(map(_extent, (input, grad_output))) >= INT32_OFFSET_LIMIT:
            problem = attrs.evolve(problem, wide_strides=True)
        return problem

    # ------------------------------------------------------------------ derived
    @property
    def spatial_dims(self) -> int:
        return len(self.input_size)

    @property
    def cpg(self) -> int:
        """Input channels per group."""
        return self.in_channels // self.groups

    @property
    def kpg(self) -> int:
        """Output channels per group."""
        return self.out_channels // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.cpg == 1 and self.kpg == 1

    @property
    def output_size(self) -> tuple[int, ...]:
        return tuple(
            (i + lo + hi - d * (f - 1) - 1) // s + 1
            for i, f, s, (lo, hi), d in zip(
                self.input_size, self.filter_size, self.stride, self.padding, self.dilation
            )
        )

    @property
    def weight_size(self) -> tuple[int, ...]:
        return (self.out_channels, self.cpg, *self.filter_size)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.batch, self.in_channels, *self.input_size)

    @property
    def grad_output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_channels, *self.output_size)

    @property
    def gemm_m(self) -> int:
        return self.kpg

    @property
    def gemm_n(self) -> int:
        return math.prod(self.filter_size) * self.cpg

    @property
    def gemm_k(self) -> int:
        return self.batch * math.prod(self.output_size)

    @property
    def flops(self) -> int:
        """Multiply-adds of the useful work, times two."""
        return 2 * self.groups * self.gemm_m * self.gemm_n * self.gemm_k

    @property
    def element_size(self) -> int:
        return {"fp16": 2, "bf16": 2, "fp32": 4}[self.dtype]

    @property
    def min_bytes(self) -> int:
        """Bytes that must move: input and grad_output read once, dW written once."""
        elems = math.prod(self.input_shape) + math.prod(self.grad_output_shape)
        return (elems + math.prod(self.weight_size)) * self.element_size

    @property
    def needs_wide_index(self) -> bool:
        """Whether an operand's element offsets reach INT32_OFFSET_LIMIT: an operand of that many
        elements (dW included, which dispatch allocates dense), or a strided view reaching that far."""
        largest = max(math.prod(self.input_shape), math.prod(self.grad_output_shape), math.prod(self.weight_size))
        return self.wide_strides or largest >= INT32_OFFSET_LIMIT

    @property
    def symmetric_padding(self) -> tuple[int, ...] | None:
        """Per-dim padding when every dim pads both sides equally, else None."""
        if all(lo == hi for lo, hi in self.padding):
            return tuple(lo for lo, _ in self.padding)
        return None

    def describe(self) -> str:
        pad = self.symmetric_padding or self.padding
        return (
            f"N={self.batch} C={self.in_channels} K={self.out_channels} G={self.groups} "
            f"in={'x'.join(map(str, self.input_size))} f={'x'.join(map(str, self.filter_size))} "
            f"s={_compact(self.stride)} p={_compact(pad)} d={_compact(self.dilation)} "
            f"{self.dtype} {self.layout}{' wide-strides' if self.wide_strides else ''}"
        )


def problem_from_dict(data: dict) -> ConvProblem:
    """The ConvProblem that ``attrs.asdict(problem)`` wrote (results files), JSON lists back to tuples."""
    def tuples(value):
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    return ConvProblem(**{key: tuples(value) for key, value in data.items()})


def _compact(values) -> str:
    values = tuple(values)
    if len(set(values)) == 1 and not isinstance(values[0], tuple):
        return str(values[0])
    return ",".join(map(str, values))


def _check_is_tensor(name: str, value) -> None:
    import torch  # torch is imported only where tensors are

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__module__}.{type(value).__qualname__}")


def _extent(tensor) -> int:
    """Elements from a tensor's first to its farthest through its strides: 1 + sum((size - 1) * stride).
    A dense tensor's extent is its element count; a view's can be far larger."""
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def _layout_of(tensor) -> str:
    from .layout import layout_of  # torch is imported only where tensors are

    return layout_of(tensor)
