"""Shifted-view numerics at realistic sizes on a GPU (skipped without one): bf16 against float64."""

import pytest

from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem
from support import GPU_LAYERS, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

#: RepLKNet-31B and UniRepLKNet layers at batch 8 (the float64 reference runs on the CPU), a long
#: 1-D filter, and the shared table's depthwise layers this family admits.
LAYERS = {
    "replknet-31x31-56": dict(batch=8, groups=128, in_channels=128, input_size=(56, 56), filter_size=31, padding=15),
    "replknet-29x29-28": dict(batch=8, groups=256, in_channels=256, input_size=(28, 28), filter_size=29, padding=14),
    "replknet-27x27-14": dict(batch=8, groups=512, in_channels=512, input_size=(14, 14), filter_size=27, padding=13),
    "replknet-13x13-7": dict(batch=8, groups=1024, in_channels=1024, input_size=(7, 7), filter_size=13, padding=6),
    "unireplknet-k5-d3-56": dict(batch=8, groups=128, in_channels=128, input_size=(56, 56), filter_size=5, dilation=3,
                                 padding=6),
    "unireplknet-k7-d2-28": dict(batch=8, groups=160, in_channels=160, input_size=(28, 28), filter_size=7, dilation=2,
                                 padding=6),  # the dilated class the router gives this family
    "unireplknet-k3-d5-28": dict(batch=8, groups=256, in_channels=256, input_size=(28, 28), filter_size=3, dilation=5,
                                 padding=5),
    "long-1d-k65": dict(batch=4, groups=512, in_channels=512, input_size=(2048,), filter_size=65, padding=32),
    **{name: GPU_LAYERS[name] for name in ("replknet-k31", "dilated-asym", "conformer-1d-k31", "mobilenetv2-s2")},
}


@pytest.mark.parametrize("split_k", [None, 1, 8])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_shifted_bf16_vs_reference(layer, layout, split_k):
    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout=layout)
    pins = {} if split_k is None else {"split_k": split_k}
    outcome = run_checked(p, family="wgrad_shifted", inputs=make_inputs(p, "cuda"), **pins)
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("layer", ["replknet-31x31-56", "long-1d-k65"])
def test_shifted_every_offered_tile(layer):
    from convwgrad.plugins import wgrad_shifted
    from convwgrad.provider.target import current_target

    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout="channels_last")
    inputs = make_inputs(p, "cuda")
    for spec in wgrad_shifted.candidate_specs(p, current_target("cuda")):
        assert_close_to_reference(run_checked(p, family="wgrad_shifted", tile=spec.tile, inputs=inputs), p)
