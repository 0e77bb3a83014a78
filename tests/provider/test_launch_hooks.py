"""The direct launch honours Triton's launch hooks as the JIT does, and skips what calls nothing."""

import pytest

from convwgrad.provider.blocks.launch import _live_hook

knobs = pytest.importorskip("triton.knobs")


def test_an_empty_hook_chain_is_no_hook():
    assert _live_hook(None) is None
    assert _live_hook(knobs.HookChain()) is None  # Triton 3.6+ installs these, empty


def test_a_hook_chain_with_a_call_and_a_plain_hook_are_kept():
    seen = []
    chain = knobs.HookChain()
    chain.add(seen.append)
    assert _live_hook(chain) is chain
    assert _live_hook(seen.append) == seen.append
    _live_hook(chain)("metadata")
    assert seen == ["metadata"]
