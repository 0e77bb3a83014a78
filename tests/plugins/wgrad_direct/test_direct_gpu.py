"""Direct-family numerics at realistic sizes on a GPU (skipped without one)."""

import pytest
import torch

from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, Tile
from support import GPU_LAYERS, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]
FAMILY = "wgrad_direct"

#: the shared table's cpg == 1 layers (depthwise and channel multiplier), plus ConvNeXt's 7x7 at N=64
LAYERS = {name: GPU_LAYERS[name] for name in (
    "mobilenetv2-144x56", "mobilenetv2-s2", "efficientnet-k5", "convnext-k7", "dilated-asym",
    "multiplier-kpg2", "conformer-1d-k31", "mamba-1d-k4", "x3d-3d",
)}
LAYERS["convnext-k7-n64-c768"] = dict(batch=64, groups=768, in_channels=768, input_size=(7, 7), filter_size=7,
                                      padding=3)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_direct_bf16_vs_reference(layer, layout):
    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout=layout)
    outcome = run_checked(p, family=FAMILY)
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("layer", ["mobilenetv2-144x56", "convnext-k7", "conformer-1d-k31"])
def test_direct_other_dtypes(layer, dtype):
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout="channels_last")
    assert_close_to_reference(run_checked(p, family=FAMILY), p)


@pytest.mark.parametrize("split_k", [1, 7, 64])
def test_direct_splits_deterministic(split_k):
    p = ConvProblem.build(**LAYERS["convnext-k7"], dtype="bf16", layout="channels_last")
    inputs = make_inputs(p, "cuda")
    tile = Tile(block_m=32, block_n=64, block_k=2, num_stages=1)
    first = run_checked(p, family=FAMILY, tile=tile, split_k=split_k, inputs=inputs)
    second = run_checked(p, family=FAMILY, tile=tile, split_k=split_k, inputs=inputs)
    assert_close_to_reference(first, p)
    assert torch.equal(first.out.view(torch.int16), second.out.view(torch.int16))


#: The sliding kernel's channels a thread by taps (as tools/variants_direct.py pins it).
def _sliding_tile(p, block_w=4):
    taps = 1
    for f in p.filter_size:
        taps *= f
    cpt = 8 if taps <= 9 else 4 if taps <= 25 else 2 if taps <= 49 else 1
    while taps * block_w > 648 and block_w > 1:
        block_w //= 2
    return Tile(block_m=cpt * 32, block_n=1, block_k=block_w, num_warps=1, num_stages=1)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_sliding_bf16_vs_reference(layer, layout):
    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout=layout)
    outcome = run_checked(p, family=FAMILY, tile=_sliding_tile(p))
    assert outcome.launches[0].kernels[0] == "_wgrad_direct_sliding_kernel"
    assert_close_to_reference(outcome, p)
