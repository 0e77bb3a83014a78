"""ConvProblem: derived values against torch, construction paths, every error path, value semantics."""

from __future__ import annotations

import math
import re

import attrs
import pytest
import torch
import torch.nn.functional as F

from convwgrad.provider import ConvProblem, plan

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


# --------------------------------------------------------------- derived values
# Each case: build() kwargs and the output size worked out by hand; torch checks it independently.
CASES = {
    "1d-grouped-asym-stride2-dil2": (
        dict(batch=2, groups=3, in_channels=6, out_channels=9, input_size=(17,), filter_size=5,
             stride=2, padding=((1, 3),), dilation=2),
        (7,),
    ),
    "1d-depthwise-prime": (
        dict(batch=3, groups=5, in_channels=5, input_size=(13,), filter_size=3, padding=1),
        (13,),
    ),
    "1d-dense-filter1": (
        dict(batch=1, groups=1, in_channels=3, out_channels=7, input_size=(1,), filter_size=1),
        (1,),
    ),
    "2d-depthwise-stride2": (
        dict(batch=2, groups=8, in_channels=8, input_size=(7, 9), filter_size=3, stride=2, padding=1),
        (4, 5),
    ),
    "2d-asym-padding-mixed": (
        dict(batch=1, groups=2, in_channels=4, out_channels=6, input_size=(11, 6), filter_size=(3, 2),
             stride=(2, 1), padding=((0, 1), (2, 0)), dilation=(1, 3)),
        (5, 5),
    ),
    "2d-channel-multiplier": (
        dict(batch=2, groups=4, in_channels=4, out_channels=8, input_size=(5, 5), filter_size=3),
        (3, 3),
    ),
    "3d-grouped-asym": (
        dict(batch=2, groups=2, in_channels=6, out_channels=4, input_size=(5, 7, 6), filter_size=(3, 1, 2),
             stride=(1, 2, 3), padding=((1, 0), (0, 2), (1, 1)), dilation=(2, 1, 1)),
        (2, 5, 3),
    ),
    "3d-depthwise": (
        dict(batch=1, groups=3, in_channels=3, input_size=(4, 4, 4), filter_size=3, padding=1),
        (4, 4, 4),
    ),
}


def _torch_output_size(problem: ConvProblem) -> tuple[int, ...]:
    """Run the forward convolution in torch; asymmetric padding goes through F.pad first."""
    x = torch.randn(problem.input_shape)
    w = torch.randn(problem.weight_size)  # conv rejects a wrong weight_size for these groups
    pads = [v for lo_hi in reversed(problem.padding) for v in lo_hi]  # F.pad: last dim first
    y = CONV[problem.spatial_dims](
        F.pad(x, pads), w, stride=problem.stride, padding=0, dilation=problem.dilation, groups=problem.groups
    )
    return tuple(y.shape[2:])


@pytest.mark.parametrize("kwargs, output_size", CASES.values(), ids=CASES.keys())
def test_derived_values(kwargs, output_size):
    p = ConvProblem.build(**kwargs, dtype="fp32")
    C, G = kwargs["in_channels"], kwargs["groups"]
    K = kwargs.get("out_channels", C)
    assert p.spatial_dims == len(kwargs["input_size"])
    assert (p.cpg, p.kpg) == (C // G, K // G)
    assert p.is_depthwise == (C == G == K)
    assert p.output_size == output_size
    assert p.output_size == _torch_output_size(p)
    assert p.weight_size == (K, C // G, *p.filter_size)
    assert p.input_shape == (kwargs["batch"], C, *kwargs["input_size"])
    assert p.grad_output_shape == (kwargs["batch"], K, *output_size)
    assert p.gemm_m == K // G
    assert p.gemm_n == math.prod(p.filter_size) * (C // G)
    assert p.gemm_k == kwargs["batch"] * math.prod(output_size)
    assert p.flops == 2 * G * p.gemm_m * p.gemm_n * p.gemm_k


@pytest.mark.parametrize("kwargs, output_size", CASES.values(), ids=CASES.keys())
def test_weight_size_matches_torch_grad(kwargs, output_size):
    """torch.nn.grad.convNd_weight returns a dW of exactly problem.weight_size."""
    p = ConvProblem.build(**kwargs, dtype="fp32")
    x, dy = torch.randn(p.input_shape), torch.randn(p.grad_output_shape)
    pads = [v for lo_hi in reversed(p.padding) for v in lo_hi]  # torch.nn.grad pads symmetrically only
    grad = getattr(torch.nn.grad, f"conv{p.spatial_dims}d_weight")
    dw = grad(F.pad(x, pads), p.weight_size, dy, stride=p.stride, padding=0, dilation=p.dilation, groups=p.groups)
    assert tuple(dw.shape) == p.weight_size


def test_depthwise_needs_one_channel_each_way():
    assert ConvProblem.build(batch=1, groups=4, in_channels=4, input_size=(5, 5), filter_size=3).is_depthwise
    # channel multiplier 2: one input channel per group but two outputs
    assert not ConvProblem.build(
        batch=1, groups=4, in_channels=4, out_channels=8, input_size=(5, 5), filter_size=3
    ).is_depthwise
    assert not ConvProblem.build(batch=1, groups=2, in_channels=4, input_size=(5, 5), filter_size=3).is_depthwise


def test_symmetric_padding_and_describe():
    sym = ConvProblem.build(batch=2, groups=1, in_channels=3, input_size=(8, 8), filter_size=3, padding=(1, 2))
    assert sym.symmetric_padding == (1, 2)
    asym = attrs.evolve(sym, padding=((1, 0), (2, 2)))
    assert asym.symmetric_padding is None
    assert "p=1,2" in sym.describe()
    assert "(1, 0)" in asym.describe()


# --------------------------------------------------------------- build()
def test_build_broadcasts_scalars():
    p = ConvProblem.build(batch=2, groups=1, in_channels=4, input_size=[9, 8, 7], filter_size=3, stride=2,
                          padding=1, dilation=2, dtype=torch.bfloat16)
    assert p.input_size == (9, 8, 7)
    assert p.filter_size == (3, 3, 3)
    assert p.stride == (2, 2, 2)
    assert p.padding == ((1, 1),) * 3
    assert p.dilation == (2, 2, 2)
    assert p.out_channels == 4  # defaults to in_channels
    assert p.dtype == "bf16"
    assert p.layout == "contiguous"


def test_build_broadcasts_one_entry_sequences():
    p = ConvProblem.build(batch=1, groups=1, in_channels=1, input_size=(6, 6), filter_size=(3,), stride=[1],
                          padding=(1,), dilation=(1,))
    assert (p.filter_size, p.stride, p.padding, p.dilation) == ((3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))


def test_build_per_dim_and_pair_padding():
    per_dim = ConvProblem.build(batch=1, groups=1, in_channels=1, input_size=(6, 6), filter_size=3, padding=[1, 2])
    assert per_dim.padding == ((1, 1), (2, 2))
    pairs = ConvProblem.build(batch=1, groups=1, in_channels=1, input_size=(6, 6), filter_size=3,
                              padding=[[0, 1], (2, 3)])
    assert pairs.padding == ((0, 1), (2, 3))


@pytest.mark.parametrize("dtype, name", [
    (torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.float32, "fp32"),
    ("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "fp32"), ("torch.float32", "fp32"),
])
def test_build_dtype_names(dtype, name):
    p = ConvProblem.build(batch=1, groups=1, in_channels=1, input_size=(3,), filter_size=1, dtype=dtype)
    assert p.dtype == name
    assert p.element_size == {"fp16": 2, "bf16": 2, "fp32": 4}[name]


def test_build_equals_constructor():
    built = ConvProblem.build(batch=2, groups=2, in_channels=4, out_channels=6, input_size=(5, 6), filter_size=3,
                              stride=(1, 2), padding=((1, 0), (0, 1)), dilation=1, dtype="fp16")
    direct = ConvProblem(batch=2, groups=2, in_channels=4, out_channels=6, input_size=(5, 6), filter_size=(3, 3),
                         stride=(1, 2), padding=((1, 0), (0, 1)), dilation=(1, 1), dtype="fp16")
    assert built == direct


# --------------------------------------------------------------- from_tensors()
@pytest.mark.parametrize("kwargs, output_size", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_from_tensors_matches_build(kwargs, output_size, dtype):
    p = ConvProblem.build(**kwargs, dtype=dtype)
    x = torch.randn(p.input_shape, dtype=dtype)
    dy = torch.randn(p.grad_output_shape, dtype=dtype)
    got = ConvProblem.from_tensors(x, p.weight_size, dy, kwargs.get("stride", 1), kwargs.get("padding", 0),
                                   kwargs.get("dilation", 1), kwargs["groups"])
    assert got == p
    assert got.layout == "contiguous"


def test_from_tensors_accepts_torch_size_and_keywords():
    x, w, dy = torch.randn(2, 6, 9, 9), torch.randn(6, 2, 3, 3), torch.randn(2, 6, 5, 5)
    p = ConvProblem.from_tensors(x, w.shape, dy, stride=2, padding=1, dilation=1, groups=3)
    assert (p.groups, p.cpg, p.kpg, p.output_size, p.dtype) == (3, 2, 2, (5, 5), "fp32")


@pytest.mark.parametrize("shape, fmt", [
    ((2, 8, 5, 7), torch.channels_last),
    ((2, 8, 3, 5, 7), torch.channels_last_3d),
])
def test_from_tensors_detects_channels_last(shape, fmt):
    x = torch.randn(shape).to(memory_format=fmt)
    weight_size = (8, 1) + (3,) * (len(shape) - 2)
    out = tuple(s - 2 for s in shape[2:])
    dy = torch.randn(shape[0], 8, *out).to(memory_format=fmt)
    p = ConvProblem.from_tensors(x, weight_size, dy, groups=8)
    assert p.layout == "channels_last"
    assert p.is_depthwise
    contiguous = ConvProblem.from_tensors(x.contiguous(), weight_size, dy.contiguous(), groups=8)
    assert contiguous.layout == "contiguous"
    assert attrs.evolve(contiguous, layout="channels_last") == p


def test_from_tensors_1d():
    x = torch.randn(3, 4, 11)
    dy = torch.randn(3, 2, 6)
    p = ConvProblem.from_tensors(x, (2, 2, 3), dy, stride=2, padding=(1,), dilation=1, groups=2)
    assert p.spatial_dims == 1
    assert (p.input_size, p.filter_size, p.output_size, p.stride, p.padding) == ((11,), (3,), (6,), (2,), ((1, 1),))
    assert p.layout == "contiguous"
    # (N, L, C) storage seen as (N, C, L): channels innermost
    x_cl = torch.randn(3, 11, 4).transpose(1, 2)
    assert ConvProblem.from_tensors(x_cl, (2, 2, 3), dy, 2, 1, 1, 2).layout == "channels_last"


# --------------------------------------------------------------- error paths

def _cases(rows):
    """pytest.params with readable, shell-safe ids: the changed fields, else the start of the expected message."""
    def row_id(row):
        text = ", ".join(f"{k}={v}" for k, v in row[0].items()) if isinstance(row[0], dict) else row[-1]
        return re.sub(r"[^A-Za-z0-9=.+-]+", "_", text.replace("torch.", "")).strip("_")[:48]

    return [pytest.param(*row, id=row_id(row)) for row in rows]

def _base(**changes):
    kwargs = dict(batch=2, groups=2, in_channels=4, out_channels=4, input_size=(8, 8), filter_size=3)
    kwargs.update(changes)
    return kwargs


def _direct(**changes):
    kwargs = dict(batch=1, groups=1, in_channels=2, out_channels=2, input_size=(6, 6), filter_size=(3, 3),
                  stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), dtype="bf16")
    kwargs.update(changes)
    return kwargs


@pytest.mark.parametrize("changes, match", _cases([
    (dict(in_channels=5, out_channels=4), r"in_channels=5 .*groups=2"),
    (dict(in_channels=4, out_channels=5), r"out_channels=5 .*groups=2"),
    (dict(groups=0), r"groups must be a positive int, got 0"),
    (dict(groups=-2), r"groups must be a positive int, got -2"),
    (dict(batch=0), r"batch must be a positive int, got 0"),
    (dict(in_channels=0), r"in_channels must be a positive int, got 0"),
    (dict(filter_size=9), r"output size \(0, 0\) < 1.*filter_size=\(9, 9\)"),
    (dict(filter_size=5, dilation=3), r"output size \(-4, -4\) < 1.*dilation=\(3, 3\)"),
    (dict(input_size=(2, 8), filter_size=5, stride=3), r"output size \(0, 2\) < 1.*input_size=\(2, 8\)"),
    (dict(stride=-1), r"stride entries must be >= 1, got \(-1, -1\)"),
    (dict(stride=0), r"stride entries must be >= 1, got \(0, 0\)"),
    (dict(stride=(1, 0)), r"stride entries must be >= 1, got \(1, 0\)"),
    (dict(padding=-1), r"padding must be >= 0 on every side, got \(\(-1, -1\), \(-1, -1\)\)"),
    (dict(padding=((0, 1), (-1, 0))), r"padding must be >= 0 on every side, got \(\(0, 1\), \(-1, 0\)\)"),
    (dict(padding="same"), r"padding 'same': string padding"),
    (dict(padding=((1, 1),)), r"padding .* has 1 pairs, expected 2"),
    (dict(padding=((1, 2, 3), (0, 0))), r"padding must be a tuple of \(before, after\) int pairs"),
    (dict(dilation=0), r"dilation entries must be >= 1, got \(0, 0\)"),
    (dict(dilation=-1), r"dilation entries must be >= 1, got \(-1, -1\)"),
    (dict(filter_size=(3, 3, 3)), r"filter_size \(3, 3, 3\) has 3 entries, expected 2"),
    (dict(stride=(1, 1, 1)), r"stride \(1, 1, 1\) has 3 entries, expected 2"),
    (dict(dilation=(1, 1, 1)), r"dilation \(1, 1, 1\) has 3 entries, expected 2"),
    (dict(input_size=(8, 8, 8, 8)), r"input_size must have 1, 2 or 3 spatial dims, got 4"),
    (dict(input_size=()), r"input_size must have 1, 2 or 3 spatial dims, got 0"),
    (dict(input_size=(0, 8)), r"input_size entries must be >= 1, got \(0, 8\)"),
    (dict(dtype=torch.float64), r"dtype torch.float64 is not supported"),
    (dict(dtype=torch.int32), r"dtype torch.int32 is not supported"),
    (dict(dtype="fp64"), r"dtype 'fp64' is not supported"),
    (dict(layout="nhwc"), r"^layout 'nhwc' is not supported; supported layouts: contiguous, channels_last$"),
]))
def test_build_errors(changes, match):
    with pytest.raises(ValueError, match=match):
        ConvProblem.build(**_base(**changes))


@pytest.mark.parametrize("changes, match", _cases([
    (dict(filter_size=(3,)), r"filter_size \(3,\) has 1 spatial dims but input_size \(6, 6\) has 2"),
    (dict(stride=(1, 1, 1)), r"stride \(1, 1, 1\) has 3 spatial dims but input_size \(6, 6\) has 2"),
    (dict(padding=((0, 0),)), r"padding \(\(0, 0\),\) has 1 spatial dims but input_size \(6, 6\) has 2"),
    (dict(dilation=(1,)), r"dilation \(1,\) has 1 spatial dims but input_size"),
    (dict(stride=[1, 1]), r"stride must be a tuple of ints, got \[1, 1\]"),
    (dict(filter_size=(3, 3.0)), r"filter_size must be a tuple of ints"),
    (dict(padding=(0, 0)), r"padding must be a tuple of \(before, after\) int pairs, got \(0, 0\)"),
    (dict(groups=True), r"groups must be a positive int, got True"),
    (dict(dtype="fp64"), r"^dtype 'fp64' is not supported; supported dtypes: fp16, bf16, fp32$"),
]))
def test_constructor_errors(changes, match):
    with pytest.raises(ValueError, match=match):
        ConvProblem(**_direct(**changes))


X = torch.randn(2, 4, 8, 8)
DY = torch.randn(2, 4, 6, 6)


@pytest.mark.parametrize("args, kwargs, match", _cases([
    ((torch.randn(2, 4), (4, 4, 3, 3), torch.randn(2, 4)), {}, r"input must be 3-D, 4-D or 5-D .*shape \(2, 4\)"),
    ((torch.randn(1, 1, 2, 2, 2, 2), (1, 1, 1, 1, 1, 1), torch.randn(1, 1, 2, 2, 2, 2)), {},
     r"input must be 3-D, 4-D or 5-D .*shape \(1, 1, 2, 2, 2, 2\)"),
    ((X, (4, 4, 3), DY), {}, r"weight_size \(4, 4, 3\) has 3 dims, input has 4"),
    ((X, (4, 4, 3, 3, 3), DY), {}, r"weight_size \(4, 4, 3, 3, 3\) has 5 dims, input has 4"),
    ((X, (4, 4, 3, 3), torch.randn(2, 4, 36)), {}, r"grad_output has 3 dims, input has 4"),
    ((X, (4, 4, 3, 3), torch.randn(2, 4, 7, 6)), {}, r"grad_output shape \(2, 4, 7, 6\) does not match .*\(2, 4, 6, 6\)"),
    ((X, (4, 4, 3, 3), torch.randn(3, 4, 6, 6)), {}, r"grad_output shape \(3, 4, 6, 6\) does not match"),
    ((X, (4, 4, 3, 3), torch.randn(2, 5, 6, 6)), {}, r"grad_output shape \(2, 5, 6, 6\) does not match"),
    ((X, (4, 4, 3, 3), DY), dict(padding=1), r"grad_output shape \(2, 4, 6, 6\) does not match .*\(2, 4, 8, 8\)"),
    ((X, (4, 4, 3, 3), DY.bfloat16()), {}, r"dtype mismatch: input is torch.float32, grad_output is torch.bfloat16"),
    ((X, (4, 4, 3, 3), torch.empty(2, 4, 6, 6, device="meta")), {},
     r"device mismatch: input is on cpu, grad_output is on meta"),
    ((X.double(), (4, 4, 3, 3), DY.double()), {}, r"dtype torch.float64 is not supported"),
    ((X.int(), (4, 4, 3, 3), DY.int()), {}, r"dtype torch.int32 is not supported"),
    ((X, (4, 4, 3, 3), DY), dict(groups=0), r"groups must be a positive int, got 0"),
    ((X, (4, 4, 3, 3), DY), dict(groups=-1), r"groups must be a positive int, got -1"),
    ((X, (4, 2, 3, 3), DY), dict(groups=3), r"weight_size \(4, 2, 3, 3\) has 2 input channels per group.*groups=3"),
    ((X, (3, 2, 3, 3), torch.randn(2, 3, 6, 6)), dict(groups=2), r"out_channels=3 is not divisible by groups=2"),
    ((X, (4, 4, 3, 3), DY), dict(stride=0), r"stride entries must be >= 1, got \(0, 0\)"),
    ((X, (4, 4, 3, 3), DY), dict(stride=-2), r"stride entries must be >= 1, got \(-2, -2\)"),
    ((X, (4, 4, 3, 3), DY), dict(padding=-1), r"padding must be >= 0 on every side"),
    ((X, (4, 4, 3, 3), DY), dict(dilation=0), r"dilation entries must be >= 1, got \(0, 0\)"),
    ((X, (4, 4, 3, 3), DY), dict(stride=(1, 1, 1)), r"stride \(1, 1, 1\) has 3 entries, expected 2"),
    ((X, (4, 4, 9, 9), DY), {}, r"output size \(0, 0\) < 1"),
]))
def test_from_tensors_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConvProblem.from_tensors(*args, **kwargs)


# --------------------------------------------------------------- value semantics
def test_hashable_and_equal_by_value():
    a = ConvProblem.build(batch=2, groups=4, in_channels=4, input_size=(6, 6), filter_size=3, padding=1)
    b = ConvProblem.build(batch=2, groups=4, in_channels=4, input_size=[6, 6], filter_size=(3, 3), padding=(1, 1))
    assert a == b and a is not b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    cache = {a: "plan"}
    assert cache[b] == "plan"
    assert a != attrs.evolve(a, batch=3)
    assert a != attrs.evolve(a, layout="channels_last")
    assert a != attrs.evolve(a, dtype="fp16")


def test_frozen():
    p = ConvProblem.build(batch=1, groups=1, in_channels=2, input_size=(4,), filter_size=3)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.batch = 2


def test_evolve_makes_a_new_problem():
    p = ConvProblem.build(batch=2, groups=4, in_channels=8, input_size=(6, 6), filter_size=3)
    q = attrs.evolve(p, groups=8)
    assert q is not p and q != p
    assert p.groups == 4 and p.cpg == 2  # the original is untouched
    assert q.groups == 8 and q.is_depthwise


@pytest.mark.parametrize("changes, match", _cases([
    (dict(groups=3), r"in_channels=8 is not divisible by groups=3"),
    (dict(out_channels=6), r"out_channels=6 is not divisible by groups=4"),
    (dict(filter_size=(7, 7)), r"output size \(0, 0\) < 1"),
    (dict(stride=(0, 1)), r"stride entries must be >= 1"),
    (dict(padding=((0, 0),)), r"padding .* has 1 spatial dims but input_size"),
    (dict(dtype="fp64"), r"dtype 'fp64' is not supported"),
]))
def test_evolve_revalidates(changes, match):
    p = ConvProblem.build(batch=2, groups=4, in_channels=8, input_size=(6, 6), filter_size=3)
    with pytest.raises(ValueError, match=match):
        attrs.evolve(p, **changes)


def test_padding_rejects_bools():
    with pytest.raises(ValueError, match=re.escape("padding")):
        ConvProblem.build(batch=1, groups=1, in_channels=1, input_size=(6, 6), filter_size=3, padding=True)


# --------------------------------------------------------------- fuzzed arguments (issue 9)
_PAD = r"padding must be an int, a sequence of 2 ints \(one per spatial dim\) or of \(before, after\) int pairs, got "
_STRIDE = r"stride must be an int or a sequence of 2 ints \(one per spatial dim\), got "


@pytest.mark.parametrize("changes, match", _cases([
    (dict(padding=1.5), _PAD + r"1\.5$"),
    (dict(padding=None), _PAD + r"None$"),
    (dict(padding=(1.0, 1)), _PAD + r"\(1\.0, 1\)$"),
    (dict(padding=((1, 1.0), (0, 0))), _PAD + r"\(\(1, 1\.0\), \(0, 0\)\)$"),
    (dict(padding=((1, True), (0, 0))), _PAD + r"\(\(1, True\), \(0, 0\)\)$"),
    (dict(padding=(True, 1)), _PAD + r"\(True, 1\)$"),
    (dict(stride=None), _STRIDE + r"None$"),
    (dict(stride=2.0), _STRIDE + r"2\.0$"),
    (dict(stride=(2.0, 1)), _STRIDE + r"\(2\.0, 1\)$"),
    (dict(stride=True), _STRIDE + r"True$"),
    (dict(stride=(1, False)), _STRIDE + r"\(1, False\)$"),
    (dict(stride="2"), _STRIDE + r"'2'$"),
    (dict(dilation=1.0), r"^dilation must be an int or a sequence of 2 ints \(one per spatial dim\), got 1\.0$"),
    (dict(filter_size=None), r"^filter_size must be an int or a sequence of 2 ints .*, got None$"),
    (dict(input_size=8), r"^input_size must be a sequence of ints \(one per spatial dim\), got 8$"),
    (dict(input_size=(8.0, 8)), r"^input_size must be a sequence of ints \(one per spatial dim\), got \(8\.0, 8\)$"),
    (dict(batch=2.0), r"^batch must be a positive int, got 2\.0$"),
    (dict(groups=True), r"^groups must be a positive int, got True$"),
    (dict(in_channels=None), r"^in_channels must be a positive int, got None$"),
    (dict(out_channels=4.0), r"^out_channels must be a positive int, got 4\.0$"),
]))
def test_build_names_the_field_of_a_non_int(changes, match):
    """Fuzzing, issue 9: these raised TypeError: 'float' object is not iterable, naming nothing."""
    with pytest.raises(ValueError, match=match):
        ConvProblem.build(**_base(**changes))


@pytest.mark.parametrize("field", ["stride", "dilation", "padding"])
def test_float_refused_whatever_came_before(field):
    """Validation does not depend on call order: the int is accepted, the equal float never."""
    for _ in range(2):
        assert ConvProblem.build(**_base(**{field: 2}, input_size=(9, 9)))
        with pytest.raises(ValueError, match=f"^{field} must be an int"):
            ConvProblem.build(**_base(**{field: 2.0}, input_size=(9, 9)))
        with pytest.raises(ValueError, match=f"^{field} must be an int"):
            ConvProblem.from_tensors(torch.randn(1, 4, 9, 9), (4, 2, 3, 3), torch.randn(1, 4, 3, 3), groups=2,
                                     **{field: 2.0})
        assert ConvProblem.from_tensors(torch.randn(1, 4, 9, 9), (4, 2, 3, 3), torch.randn(1, 4, 4, 4), groups=2,
                                        stride=2)


def test_integer_types_stand_for_ints():
    np = pytest.importorskip("numpy")
    plain = ConvProblem.build(**_base(stride=2, padding=(1, 0)))
    assert ConvProblem.build(**_base(batch=np.int64(2), stride=np.int32(2), padding=np.array([1, 0]))) == plain
    assert ConvProblem.build(**_base(stride=torch.tensor(2), padding=torch.tensor([1, 0]))) == plain
    assert type(ConvProblem.build(**_base(batch=np.int64(2))).batch) is int


@pytest.mark.parametrize("args, kwargs, error, match", _cases([
    ((X.numpy(), (4, 4, 3, 3), DY), {}, TypeError, r"^input must be a torch.Tensor, got numpy.ndarray$"),
    ((X, (4, 4, 3, 3), DY.tolist()), {}, TypeError, r"^grad_output must be a torch.Tensor, got builtins.list$"),
    ((X, (4, 4, 3.0, 3), DY), {}, ValueError, r"^weight_size must be a sequence of ints .*, got \(4, 4, 3\.0, 3\)$"),
    ((X, None, DY), {}, ValueError, r"^weight_size must be a sequence of ints .*, got None$"),
    ((X, (4, 4, 3, 3), DY), dict(groups=True), ValueError, r"^groups must be a positive int, got True$"),
    ((X, (4, 4, 3, 3), DY), dict(groups=1.0), ValueError, r"^groups must be a positive int, got 1\.0$"),
    ((X, (4, 4, 3, 3), DY), dict(padding=1.5), ValueError, _PAD + r"1\.5$"),
    ((X, (4, 4, 3, 3), DY), dict(stride=None), ValueError, _STRIDE + r"None$"),
]))
def test_from_tensors_names_the_field_of_a_wrong_type(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        ConvProblem.from_tensors(*args, **kwargs)


# --------------------------------------------------------------- index width from strides (issue 9)
def _meta(*shape):
    """A tensor with shape and strides but no memory: 2**32-element bases cost nothing."""
    return torch.empty(*shape, dtype=torch.bfloat16, device="meta")


def test_strided_view_past_int32_offsets_needs_wide_index():
    """x[:, :, ::4] of a 2**32-element tensor holds 2**30 elements but reaches offset ~2**32:
    the problem says so, so the plan indexes in 64 bits (it raised 'plan with wide_index')."""
    x = _meta(1, 8, 2**29)[:, :, ::4]
    assert x.numel() < 2**31 <= sum((n - 1) * s for n, s in zip(x.shape, x.stride()))
    dy = _meta(1, 8, 2**27 - 2)
    p = ConvProblem.from_tensors(x, (8, 1, 3), dy, groups=8)
    assert p.wide_strides and p.needs_wide_index
    assert p.describe().endswith(" wide-strides")
    dense = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(2**27,), filter_size=3)
    assert not dense.needs_wide_index and p == attrs.evolve(dense, wide_strides=True)
    for family in ("wgrad_splitk", "wgrad_merged"):
        assert plan(p, "sm_90", family=family).spec.wide_index
        assert not plan(dense, "sm_90", family=family).spec.wide_index


def test_strided_grad_output_counts_too():
    x = _meta(1, 8, 2**27)
    dy = _meta(1, 8, 2**29)[:, :, : 2**27 - 2]  # channel stride 2**29: the last channel starts at 7 * 2**29
    p = ConvProblem.from_tensors(x, (8, 1, 3), dy, groups=8)
    assert p.wide_strides and plan(p, "sm_90", family="wgrad_splitk").spec.wide_index


def test_shapes_alone_decide_where_they_can():
    """A view below the limit, and a dense tensor past it, pose the same problem as build():
    wide_strides is only what the shapes cannot tell."""
    below = ConvProblem.from_tensors(_meta(1, 8, 2**26)[:, :, ::4], (8, 1, 3), _meta(1, 8, 2**24 - 2), groups=8)
    assert below == ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(2**24,), filter_size=3)
    dense = ConvProblem.from_tensors(_meta(1, 8, 2**28), (8, 1, 3), _meta(1, 8, 2**28 - 2), groups=8)
    assert not dense.wide_strides and dense.needs_wide_index
    assert dense == ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(2**28,), filter_size=3)


def test_wide_strides_is_a_public_field():
    """A problem built from sizes alone can still ask for 64-bit offsets."""
    p = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(16,), filter_size=3)
    wide = attrs.evolve(p, wide_strides=True)
    assert plan(wide, "sm_90", family="wgrad_splitk").spec.wide_index
    with pytest.raises(ValueError, match=r"^wide_strides must be a bool, got .yes.$"):
        attrs.evolve(p, wide_strides="yes")
