"""Test setup: without a GPU, Triton kernels run in the interpreter (set before triton is imported)."""

import os

import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def _triton_language_namespaces():
    import triton.language as tl

    return (tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base)


#: ``triton.language`` as imported, before any kernel ran in the interpreter (see triton_language_unpatched)
_IMPORTED_LANGUAGE = ()
if os.environ.get("TRITON_INTERPRET") == "1":
    _IMPORTED_LANGUAGE = tuple(dict(vars(namespace)) for namespace in _triton_language_namespaces())


@pytest.fixture(scope="session", autouse=True)
def native_warm_path():
    """The native warm path loaded before the first test (its build starts on first use otherwise,
    and would load midway through the run): every test then sees what a user's warm process does."""
    from convwgrad.provider import native

    return native.load()


@pytest.fixture(autouse=True)
def triton_language_unpatched():
    """Triton 3.9's interpreter patches ``triton.language`` for a kernel's run and restores it, except
    where a ``@triton.jit`` helper of another module (``tl.sum``'s own module, ``triton.language.core``)
    is called: those patches stay, and a later in-process compile (a compile proof) then fails with
    "'value' object has no attribute 'dtype'". Each test starts from the language as imported."""
    yield
    for namespace, original in zip(_triton_language_namespaces(), _IMPORTED_LANGUAGE):
        for name, value in list(vars(namespace).items()):
            if name.startswith("__"):
                continue
            if name not in original:
                delattr(namespace, name)
            elif value is not original[name]:
                setattr(namespace, name, original[name])


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
