"""The persistent tuning cache: consulted before the policy, never trusted when corrupt or stale."""

import json

import pytest

import convwgrad
from convwgrad.provider import PROFILES, ConvProblem
from convwgrad.selectors.tuning import ENV, write_cache

P = ConvProblem.build(batch=8, groups=64, in_channels=64, input_size=(14, 14), filter_size=5, padding=2,
                      layout="channels_last")
T = PROFILES["gfx950"]


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv(ENV, str(path))
    return path


def test_tuned_spec_is_taken_before_the_policy(cache_file):
    tuned = convwgrad.plan(P, T, family="wgrad_merged", group_merge=4, split_k=3).spec
    with pytest.warns(UserWarning, match="cannot read it"):  # the file does not exist yet
        assert convwgrad.plan(P, T).spec != tuned
    write_cache(str(cache_file), [(P, T, tuned, 0.01)])
    chosen = convwgrad.plan(P, T)
    assert chosen.spec == tuned and chosen.rule.startswith("tuned:")
    assert convwgrad.plan(P, T, split_k=2).split_k == 2  # pins bypass the cache


def test_corrupt_file_is_ignored_with_a_warning(cache_file):
    cache_file.write_text("{not json")
    with pytest.warns(UserWarning, match="ignored"):
        chosen = convwgrad.plan(P, "gfx942")
    assert not chosen.rule.startswith("tuned")


def test_stale_library_version_is_ignored(cache_file):
    tuned = convwgrad.plan(P, T, family="wgrad_merged", group_merge=4, split_k=3).spec
    write_cache(str(cache_file), [(P, T, tuned, 0.01)])
    data = json.loads(cache_file.read_text())
    data["library_version"] = "0.0.0-old"
    cache_file.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="stale"):
        chosen = convwgrad.plan(P, T)
    assert not chosen.rule.startswith("tuned")


def test_entry_the_gate_refuses_now_falls_back_to_the_policy(cache_file):
    bad = convwgrad.plan(P, T, family="wgrad_merged", group_merge=4, split_k=3).spec
    import attrs

    write_cache(str(cache_file), [(P, T, attrs.evolve(bad, group_merge=128), 0.01)])
    with pytest.warns(UserWarning, match="refused now"):
        chosen = convwgrad.plan(P, T)
    assert chosen.rule.startswith("priority")


def test_cache_built_from_sweep_results(tmp_path, monkeypatch):
    from convwgrad.cli import main

    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,N,C,g,H,W,k,s\ntiny,1,8,8,6,6,3,1\n")
    results, tuned = tmp_path / "results.csv", tmp_path / "tuned.json"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert main(["sweep", str(shapes), "-o", str(results), "--splits", "1,2", "--first-tile-only",
                 "--no-progress", "--dtype", "fp32"]) == 0
    assert main(["score", str(results), "--tuning-cache", str(tuned)]) == 0
    data = json.loads(tuned.read_text())
    assert len(data["entries"]) == 1 and data["entries"][0]["target"] == "interpreter"
    monkeypatch.setenv(ENV, str(tuned))
    problem = convwgrad.ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(6, 6), filter_size=3,
                                          padding=1, dtype="fp32", layout="channels_last")
    chosen = convwgrad.plan(problem, "interpreter")
    assert chosen.rule.startswith("tuned:")
    assert chosen.kernel_name == min(
        (r for r in __import__("csv").DictReader(open(results)) if r["passed"] == "True"),
        key=lambda r: float(r["time_ms"]))["kernel_name"]


# --------------------------------------------------------------- malformed files (fuzzing, issue 9)
def _plan_recording_warnings():
    """plan(P, T) with every warning recorded (none filtered as already shown)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = convwgrad.plan(P, T)
    return chosen, caught


@pytest.mark.parametrize("entries", [5, None, True, "entries", {"problem": {}}],
                         ids=["int", "null", "bool", "str", "object"])
def test_entries_not_a_list_warns_once_and_uses_the_policy(cache_file, entries):
    cache_file.write_text(json.dumps({"format": 1, "library_version": convwgrad.__version__, "entries": entries}))
    chosen, caught = _plan_recording_warnings()
    assert not chosen.rule.startswith("tuned")
    assert [str(w.message) for w in caught] == [
        f"{ENV}={cache_file}: ignored (MalformedCacheError: 'entries' is {entries!r}, expected a list of entries)"
    ]
    assert caught[0].filename == __file__  # the user's call, not pluggy's or convwgrad's frames
    again, caught = _plan_recording_warnings()
    assert again == chosen and caught == []  # once per version of the file


@pytest.mark.parametrize("data, what", [
    ([], "the top level is a JSON list"),
    ("cache", "the top level is a JSON str"),
    ({"format": 1, "library_version": convwgrad.__version__}, "'entries' is None"),
], ids=["list", "string", "no-entries"])
def test_malformed_top_level_names_what_is_wrong(cache_file, data, what):
    cache_file.write_text(json.dumps(data))
    chosen, caught = _plan_recording_warnings()
    assert not chosen.rule.startswith("tuned")
    assert len(caught) == 1 and what in str(caught[0].message) and str(cache_file) in str(caught[0].message)
    assert caught[0].filename == __file__


def test_entries_that_are_not_objects_are_ignored_in_one_warning(cache_file):
    tuned = convwgrad.plan(P, T, family="wgrad_merged", group_merge=4, split_k=3).spec
    write_cache(str(cache_file), [(P, T, tuned, 0.01)])
    data = json.loads(cache_file.read_text())
    good = data["entries"][0]
    data["entries"] = [5, None, "entry", [1, 2], {**good, "problem": 7}, {**good, "spec": None}, good]
    cache_file.write_text(json.dumps(data))
    chosen, caught = _plan_recording_warnings()
    assert chosen.spec == tuned and chosen.rule.startswith("tuned:")  # the good entry still counts
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"{ENV}={cache_file}: 6 of 7 entries ignored (entry 0: MalformedCacheError: "
                               "an entry is 5, expected an object; entry 1: ")
    assert message.endswith("; ...)")  # the rest counted, not spelt out
    assert caught[0].filename == __file__


def test_entry_with_an_oversized_tile_falls_back_to_the_policy(cache_file):
    """Fuzzing, issue 9: a tuned 4096 x 4096 tile was admitted and crashed at launch."""
    import attrs

    from convwgrad.provider import Tile

    tuned = convwgrad.plan(P, T, family="wgrad_splitk").spec
    write_cache(str(cache_file), [(P, T, attrs.evolve(tuned, tile=Tile(block_m=4096, block_n=4096, block_k=16)), 0.01)])
    chosen, caught = _plan_recording_warnings()
    assert not chosen.rule.startswith("tuned")
    assert len(caught) == 1 and "refused now" in str(caught[0].message)
    assert "block_m=4096 exceeds the family's largest block_m 64" in str(caught[0].message)
    assert caught[0].filename == __file__
