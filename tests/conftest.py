"""Test setup: without a GPU, Triton kernels run in the interpreter (set before triton is imported)."""

import os

import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def native_warm_path():
    """The native warm path loaded before the first test (its build starts on first use otherwise,
    and would load midway through the run): every test then sees what a user's warm process does."""
    from convwgrad.provider import native

    return native.load()


@pytest.fixture
def no_tf32():
    """fp32 checks at 1e-5 need TF32 off, as torch's own fp32 convolutions would."""
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = previous


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
