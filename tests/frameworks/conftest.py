"""Framework tests: compiled code always traces the current convwgrad."""

import pytest
import torch._functorch.config


@pytest.fixture(autouse=True)
def no_aot_autograd_cache():
    """AOTAutograd's on-disk cache keys a compiled backward on the graph dynamo captured, where
    ``convwgrad::conv`` is one opaque node: a cached backward traced from an older
    ``_conv_backward`` would be reused after that function changes (seen here: a planted error in
    it went unnoticed by the compile tests until this cache was off). Inductor's own cache stays on:
    its key is the traced graph, backward included."""
    with torch._functorch.config.patch(enable_autograd_cache=False):
        yield


@pytest.fixture
def pinned(monkeypatch):
    """pin(family): every layer's dW planned for ``family``, patched layers' routes and dispatch alike."""
    from convwgrad.frameworks import torch_ops
    from convwgrad.provider import dispatch
    from convwgrad.provider.plan import plan as real_plan

    def pin(family):
        def pinned_plan(problem, target=None, **pins):
            return real_plan(problem, target, family=family)

        monkeypatch.setattr(torch_ops, "plan", pinned_plan)
        monkeypatch.setattr(dispatch, "make_plan", pinned_plan)
        dispatch.clear_prepared_calls()

    yield pin
    dispatch.clear_prepared_calls()
