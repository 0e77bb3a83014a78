"""The problem: one grouped-convolution weight gradient, described by value.

A :class:`ConvProblem` is frozen and hashable, so it can key a plan cache.
Every spatial quantity is a tuple with one entry per spatial dimension
(1, 2 or 3 of them, outermost first: depth, height, width).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import attrs
from attrs import field

#: Supported element types, by the short names the CLI and kernel names use.
DTYPES = ("fp16", "bf16", "fp32")
#: Memory layouts of the activations (input and grad_output).
LAYOUTS = ("contiguous", "channels_last")

_TORCH_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _one_of(allowed: tuple):
    """attrs' ``in_`` with a one-line message naming the field, the value and the choices
    (``in_``'s ValueError also carries the attrs Attribute, whose repr is what ``str()`` shows)."""

    def check(instance, attribute, value):
        if value not in allowed:
            raise ValueError(f"'{attribute.name}' must be in ({', '.join(allowed)}), got {value!r}")

    return check


def _positive_int(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


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


def _spatial(name: str, value: int | Sequence[int], rank: int) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * rank
    value = tuple(value)
    if len(value) == 1 and rank > 1:
        return value * rank
    if len(value) != rank:
        raise ValueError(f"{name} {value!r} has {len(value)} entries, expected {rank} (one per spatial dim)")
    return value


def _padding(value, rank: int) -> tuple[tuple[int, int], ...]:
    """Accept p, (p_d, p_h, p_w) or ((lo, hi), ...) and return per-side pairs."""
    if isinstance(value, str):
        raise ValueError(f"padding {value!r}: string padding is not supported, give ints")
    if isinstance(value, int):
        return ((value, value),) * rank
    value = tuple(value)
    if value and all(isinstance(v, (tuple, list)) for v in value):
        pairs = tuple(tuple(p) for p in value)
        if len(pairs) != rank:
            raise ValueError(f"padding {value!r} has {len(pairs)} pairs, expected {rank}")
        return pairs
    return tuple((p, p) for p in _spatial("padding", value, rank))


@attrs.frozen(kw_only=True)
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
    dtype: str = field(validator=_one_of(DTYPES))
    layout: str = field(default="contiguous", validator=_one_of(LAYOUTS))

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
        """Like the constructor, but scalars broadcast over the spatial dims and ``dtype`` may be a torch dtype."""
        input_size = tuple(input_size)
        rank = len(input_size)
        return cls(
            batch=batch,
            groups=groups,
            in_channels=in_channels,
            out_channels=in_channels if out_channels is None else out_channels,
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
        if input.dim() not in (3, 4, 5):
            raise ValueError(
                f"input must be 3-D, 4-D or 5-D (N, C, *spatial), got shape {tuple(input.shape)}"
            )
        weight_size = tuple(int(s) for s in weight_size)
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
        if not isinstance(groups, int) or groups < 1:
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
            f"{self.dtype} {self.layout}"
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


def _layout_of(tensor) -> str:
    from .layout import layout_of  # torch is imported only where tensors are

    return layout_of(tensor)
