"""The aten channels_last family on the GPU's realistic layers (skipped without one): NCHW operands,
every dtype, against float64; aten's channels_last path is cuDNN's there."""

import pytest

from convwgrad.bench import make_inputs
from convwgrad.plugins.aten_channels_last import FAMILY
from convwgrad.provider import ConvProblem
from support import GPU_LAYERS, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

#: every shared layer: 1-D (run as height-1 2-D), 2-D and 3-D
LAYERS = sorted(GPU_LAYERS)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("layer", LAYERS)
def test_nchw_layers_vs_reference(layer, dtype):
    problem = ConvProblem.build(**GPU_LAYERS[layer], dtype=dtype, layout="contiguous")
    outcome = run_checked(problem, family=FAMILY, inputs=make_inputs(problem, "cuda"))
    assert_close_to_reference(outcome, problem)
