"""The aten channels_last family on the GPU's realistic layers (skipped without one): NCHW operands,
every dtype, against float64; aten's channels_last path is cuDNN's there.

The bar is float64's tolerance, or, where cuDNN's channels_last kernel rounds more than that (fp16:
the H200 gave 1.9e-3 on the dilated layer with asymmetric padding, session 6), no worse than twice
the error of the path the user had without convwgrad: torch's own dW of the same NCHW operands."""

import pytest

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.plugins.aten_channels_last import FAMILY
from convwgrad.provider import ConvProblem
from convwgrad.provider.plan import NoCandidateError
from convwgrad.provider.reference import TOLERANCE, aten_weight_grad_call, reference_weight_grad, relative_error
from support import GPU_LAYERS, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

#: every shared layer: 1-D (run as height-1 2-D), 2-D and 3-D
LAYERS = sorted(GPU_LAYERS)
#: how much larger than stock torch's own error on the same NCHW operands the family's may be
STOCK_ERROR_FACTOR = 2.0


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("layer", LAYERS)
def test_nchw_layers_vs_reference(layer, dtype):
    problem = ConvProblem.build(**GPU_LAYERS[layer], dtype=dtype, layout="contiguous")
    if dtype == "fp16" and (any(d > 1 for d in problem.dilation) or problem.symmetric_padding is None):
        with pytest.raises(NoCandidateError, match="dtype=fp16 with dilation or asymmetric padding"):
            convwgrad.plan(problem, "cuda", family=FAMILY)  # the class measured at 8x stock's error
        return
    x, dy = make_inputs(problem, "cuda")
    outcome = run_checked(problem, family=FAMILY, inputs=(x, dy))
    stock = relative_error(aten_weight_grad_call(problem)(x, dy), reference_weight_grad(problem, x, dy))
    bar = max(TOLERANCE[problem.dtype], STOCK_ERROR_FACTOR * stock)
    assert outcome.error <= bar, (f"{problem.describe()}: relative error {outcome.error:.3e}, stock torch's NCHW "
                                  f"path {stock:.3e}, tolerance {TOLERANCE[problem.dtype]:.0e}")
