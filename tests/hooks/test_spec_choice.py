"""One path, several upstreams: the spec for a file is picked by the file's content (its verified
sha256, else the one spec whose pins and hook points all hold); none or several is an error naming them."""
import hashlib
from pathlib import Path

import pytest

from otca_patch.hooks.select import SpecChoiceError, candidates, choose_spec, spec_choice_for_script
from otca_patch.hooks.spec import Hook, TargetSpec

DANCE = "def train_one_step(samples, advantages):\n    samples['advantages'] = advantages\n"
MIX = "def train_one_step(samples, merged):\n    samples['advantages'] = merged\n"


def spec(name: str, upstream: str, value: str, sha: str = "0" * 64) -> TargetSpec:
    hook = Hook(name="per_step_advantages", function="train_one_step", anchor=f"samples['advantages'] = {value}",
                action="replace", code=f"samples['advantages'] = {value}", reads=("samples", value))
    return TargetSpec(name=name, upstream=upstream, file="fastvideo/train.py", runtime="unused", verified_commit="c0ffee",
                      verified_sha256=sha, hooks=(hook,), path=f"patches/{upstream}.toml")


def upstream_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "checkout" / "fastvideo" / "train.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_one_spec_that_holds_is_picked_and_says_why(tmp_path):
    specs = [spec("dance", "DanceGRPO", "advantages"), spec("mix", "MixGRPO", "merged")]
    for text, expected, other in ((DANCE, "dance", "mix"), (MIX, "mix", "dance")):
        path = upstream_file(tmp_path, text)
        assert candidates(path, specs) == specs
        choice = choose_spec(path, specs)
        assert choice.spec.name == expected
        assert "hold on this file" in choice.reason and other in choice.reason


def test_the_verified_file_is_picked_by_its_sha256_first(tmp_path):
    both = "def train_one_step(samples, advantages, merged):\n    samples['advantages'] = advantages\n" \
           "    samples['advantages'] = merged\n"
    path = upstream_file(tmp_path, both)
    sha = hashlib.sha256(both.encode()).hexdigest()
    specs = [spec("dance", "DanceGRPO", "advantages"), spec("mix", "MixGRPO", "merged", sha=sha)]
    choice = choose_spec(path, specs)
    assert choice.spec.name == "mix" and "verified on" in choice.reason


def test_two_specs_that_both_hold_is_an_error_naming_both(tmp_path):
    both = "def train_one_step(samples, advantages, merged):\n    samples['advantages'] = advantages\n" \
           "    samples['advantages'] = merged\n"
    path = upstream_file(tmp_path, both)
    with pytest.raises(SpecChoiceError, match=r"several specs all hold.*dance \(patches/DanceGRPO.toml\), mix"):
        choose_spec(path, [spec("dance", "DanceGRPO", "advantages"), spec("mix", "MixGRPO", "merged")])


def test_no_spec_holding_is_an_error_naming_each_nearest_first(tmp_path):
    path = upstream_file(tmp_path, "def train_one_step(samples, other):\n    samples['advantages'] = other\n")
    with pytest.raises(SpecChoiceError) as error:
        choose_spec(path, [spec("dance", "DanceGRPO", "advantages"), spec("mix", "MixGRPO", "merged")])
    message = str(error.value)
    assert "none of the 2 specs for this path holds" in message
    assert "dance (DanceGRPO" in message and "mix (MixGRPO" in message
    assert "function train_one_step" in message and "c0ffee" in message  # the nearest spec's PatchError


def test_a_path_with_one_spec_is_that_spec_and_other_paths_none(tmp_path):
    path = upstream_file(tmp_path, "broken(")
    only = [spec("dance", "DanceGRPO", "advantages")]
    assert choose_spec(path, only).spec is only[0]  # applying it raises the precise PatchError later
    assert spec_choice_for_script(tmp_path / "elsewhere.py", only) is None
