"""Every choice the selectors make passes its family's real gate, over the whole shape corpus."""

import glob
import os

import pytest

import convwgrad
from convwgrad.plugins.wgrad_merged.launcher import group_merge_available
from convwgrad.provider import PROFILES, get_plugin_manager
from convwgrad.shapes import read_csv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
CORPUS = sorted(glob.glob(os.path.join(ROOT, "shapes", "*.csv")))
TARGETS = ["sm_90", "gfx950", "gfx942", "interpreter"]


def corpus():
    return [problem for path in CORPUS for _, problem in read_csv(path)]


def test_corpus_is_there():
    assert CORPUS and len(corpus()) >= 30


@pytest.mark.parametrize("target", TARGETS)
def test_selector_choices_replay_through_support(target):
    pm = get_plugin_manager()
    t = PROFILES[target]
    merged = 0
    for problem in corpus():
        for pins in ({}, {"family": "wgrad_merged"}, {"family": "wgrad_splitk"}):
            try:
                chosen = convwgrad.plan(problem, t, **pins)
            except ValueError:
                assert pins.get("family") == "wgrad_merged" and problem.groups % 2, problem.describe()
                continue
            verdict = pm.hook.convwgrad_support(problem=problem, spec=chosen.spec, target=t)
            assert verdict, (problem.describe(), chosen.kernel_name, verdict)
            assert all(size <= limit for grid in chosen.grid for size, limit in zip(grid, t.max_grid))
            if chosen.family == "wgrad_merged":
                merged += 1
                assert group_merge_available(problem, chosen.spec, t) == [], chosen.kernel_name
    assert merged > 0
