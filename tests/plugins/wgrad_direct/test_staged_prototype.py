"""The shared-memory staged prototype (tools/proto_staged.py, issue 10's next direct kernel until it
is in the library): its input gate on the CPU, its sm_90 code compiled on the CPU (16-byte
asynchronous copies, no spill), and every check case against float64 on the GPU (Gluon has no
interpreter)."""

import importlib.util
import pathlib
import re

import pytest
import torch

_PATH = pathlib.Path(__file__).parents[3] / "tools" / "proto_staged.py"
_SPEC = importlib.util.spec_from_file_location("proto_staged", _PATH)
proto = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(proto)
_ROLLING_SPEC = importlib.util.spec_from_file_location("proto_rolling", _PATH.parent / "proto_rolling.py")
_rolling = importlib.util.module_from_spec(_ROLLING_SPEC)
_ROLLING_SPEC.loader.exec_module(_rolling)


def _cl(*shape, dtype=torch.bfloat16):
    return torch.randn(shape, dtype=dtype).contiguous(memory_format=torch.channels_last)


def test_gate_admits_a_channels_last_layer():
    assert proto.unsupported(_cl(2, 48, 16, 13), _cl(2, 48, 16, 13), 7, 3, 1) == []


@pytest.mark.parametrize("case, field", [
    ("nchw", "input strides"),
    ("narrow-channels", "16-byte copies"),
    ("dtype-mix", "one dtype"),
    ("dy-shape", "grad_output shape"),
])
def test_gate_names_the_field_it_refuses(case, field):
    x, dy = _cl(2, 48, 16, 13), _cl(2, 48, 16, 13)
    if case == "nchw":
        x = x.contiguous()
    elif case == "narrow-channels":  # 4 bf16 channels: an 8-byte column
        x, dy = _cl(2, 4, 16, 13), _cl(2, 4, 16, 13)
    elif case == "dtype-mix":
        dy = dy.float()
    elif case == "dy-shape":
        dy = _cl(2, 48, 15, 13)
    reasons = proto.unsupported(x, dy, 7, 3, 1)
    assert reasons and any(field in r for r in reasons), reasons
    if torch.cuda.is_available():  # run() raises with the same reasons before any launch
        with pytest.raises(ValueError, match=re.escape(field)):
            proto.run(x.cuda(), dy.cuda(), 7, 3, proto.plan(x.shape, 7, 3, bw=8))


@pytest.mark.parametrize("k, stride, dtype", [(7, 1, "bfloat16"), (3, 2, "bfloat16"), (5, 1, "float16"),
                                              (7, 1, "float32")])
def test_sm90_code_copies_16_bytes_and_does_not_spill(k, stride, dtype):
    config = proto.configs_for(k)[0]
    compiled = proto.compile_offline(k, config, stride, dtype)
    ptx = compiled.asm["ptx"]
    # cp.async.cg.shared.global [dst], [src], 0x10, src_size: every copy moves 16 bytes
    copies = re.findall(r"cp\.async\.c[ag]\.shared\.global\S*\s+\[[^\]]+\],\s*\[[^\]]+\],\s*(\w+)", ptx)
    assert copies and all(int(size, 0) == 16 for size in copies), copies[:8]
    assert compiled.metadata.shared > 0
    usage = _rolling._sass_summary(compiled.asm["cubin"])  # ptxas's registers and stack (spills)
    registers, stack = (int(v) for v in re.search(r"regs (\d+) stack (\d+)", usage).groups())
    assert stack == 0 and registers <= 128, usage


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="Gluon kernels run on a CUDA GPU only")
def test_every_check_case_matches_float64():
    assert proto.check() == 0
