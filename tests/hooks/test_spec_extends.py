"""The spec is the one place a target is registered, and a spec extends its family's skeleton: a
trainer that follows its family is one short file; entries are overridden, added and dropped by name;
the shipped specs repeat no run of more than 20 lines."""
from __future__ import annotations

import itertools
import shutil
import textwrap
from pathlib import Path

import pytest

from otca_patch.config import OtcaConfig
from otca_patch.hooks.rewrite import check
from otca_patch.hooks.source import read_source
from otca_patch.hooks.spec import PACKAGED_PATCHES_DIR, load_spec, load_specs
from otca_patch.targets.dancegrpo import GrpoRuntime
from otca_patch.targets.registry import runtime_for, spec_named
from upstream_snapshots import upstream_checkout

#: a FLUX-like DanceGRPO trainer registered the way a newcomer would: this file, nothing else
ONE_FILE = textwrap.dedent('''\
    # A FLUX-like DanceGRPO trainer. Format: docs/spec-format.md.
    extends = "dancegrpo/_flux_family.toml"

    [target]
    name = "dancegrpo-flux-fork"
    file = "fastvideo/train_grpo_flux_fork.py"
    verified_commit = "15cc71d53cc2e6e18a68ee607d5fb6ba9a99e344"
    verified_sha256 = "1b9ba86bf9ad6b384c996cd9fad0244bbc19b7c0a3fe0ac33793545bf2f9a91b"
    description = "the FLUX trainer under another name"
''')


def config(tmp_path, **fields):
    return OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs"), **fields)


@pytest.fixture()
def patches(tmp_path):
    """A patches folder holding the shipped DanceGRPO skeletons and nothing else."""
    folder = tmp_path / "patches" / "dancegrpo"
    folder.mkdir(parents=True)
    for skeleton in (PACKAGED_PATCHES_DIR / "dancegrpo").glob("_*.toml"):
        shutil.copy2(skeleton, folder / skeleton.name)
    return tmp_path / "patches"


def test_a_trainer_that_follows_its_family_is_one_file(patches, tmp_path):
    assert load_specs(patches) == [], "skeletons are not targets"
    (patches / "dancegrpo" / "train_grpo_flux_fork.toml").write_text(ONE_FILE)
    [fork] = load_specs(patches)
    flux = spec_named("dancegrpo-flux")
    assert (fork.name, fork.file, fork.upstream) == ("dancegrpo-flux-fork", "fastvideo/train_grpo_flux_fork.py", "DanceGRPO")
    # every hook point, pin, output, flag and the smoke objectives of the family, in the family's order
    # (the FLUX trainer's own objective-timing probe is not the family's)
    family = tuple(h for h in flux.hooks if not h.name.startswith("probe_"))
    assert len(family) == len(flux.hooks) - 3
    assert fork.hooks == family and fork.pins == flux.pins and len(fork.hooks) == 8 and len(fork.pins) == 4
    assert [h.name for h in fork.hooks][:3] == ["collect_final_prediction", "collect_decoded_images", "per_step_advantages"]
    assert (fork.runtime, fork.outputs, fork.flags) == ("otca_patch.targets.dancegrpo:GrpoRuntime",
                                                       ("images", "reward.txt"), ("otca_final_state",))
    assert fork.smoke.objectives == ("upstream", "clip_t") and fork.smoke.module == ""
    assert [Path(p).name for p in fork.extends] == ["_flux_family.toml", "_dancegrpo.toml"]
    # its runtime is the family's, built for this target; the family's flag is accepted, another refused
    runtime = runtime_for("dancegrpo-flux-fork", config(tmp_path, otca_final_state="prediction"), patches)
    assert type(runtime) is GrpoRuntime and runtime.spec.name == "dancegrpo-flux-fork"
    with pytest.raises(ValueError, match="--otca_video_frames: not a flag of target dancegrpo-flux-fork"):
        runtime_for("dancegrpo-flux-fork", config(tmp_path, otca_video_frames=8), patches)


def test_the_one_file_spec_holds_on_the_trainer_it_names():
    """Applied to a copy of DanceGRPO's FLUX trainer under the new name, every hook point and pin holds."""
    checkout = upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", "fastvideo/train_grpo_flux.py")
    source = read_source(str(checkout / "fastvideo" / "train_grpo_flux.py"))
    fork = spec_named("dancegrpo-flux")  # the shipped FLUX spec is such a one-file spec
    assert Path(fork.path).read_text().count("\n") < 20 and fork.extends
    statuses = check(source, fork)
    assert statuses and all(status.ok for status in statuses), [s.problem for s in statuses if not s.ok]


SKELETON = textwrap.dedent('''\
    [target]
    upstream = "U"
    runtime = "otca_patch.targets.dancegrpo:GrpoRuntime"
    outputs = ["out"]

    [target.smoke]
    objectives = ["upstream", "clip_t"]

    [[pins]]
    name = "p1"
    function = "f"
    anchor = "x = 1"

    [[hooks]]
    name = "a"
    function = "f"
    anchor = "x = 1"
    action = "insert_after"
    code = "y = 1"
    reads = []

    [[hooks]]
    name = "b"
    function = "f"
    anchor = "x = 2"
    action = "insert_after"
    code = "y = 2"
    reads = []

    [[hooks]]
    name = "c"
    function = "f"
    anchor = "x = 3"
    action = "insert_after"
    code = "y = 3"
    reads = []
''')

CHILD_TARGET = textwrap.dedent('''\
    [target]
    name = "t"
    file = "a/b.py"
    verified_commit = "c"
    verified_sha256 = "s"
''')


def hook(name: str, code: str, position: str = "") -> str:
    return (f'\n[[hooks]]\nname = "{name}"\n{position}function = "f"\nanchor = "x = 9"\naction = "replace"\n'
            f'code = "{code}"\nreads = []\n')


def child(tmp_path: Path, text: str, skeleton: str = SKELETON) -> Path:
    (tmp_path / "fam").mkdir(exist_ok=True)
    (tmp_path / "fam" / "_base.toml").write_text(skeleton)
    path = tmp_path / "fam" / "child.toml"
    path.write_text(text)
    return path


def test_entries_are_replaced_appended_placed_and_dropped_by_name(tmp_path):
    text = ('extends = "fam/_base.toml"\ndrop = ["c"]\n\n' + CHILD_TARGET + '\n[target.smoke]\nmodule = "m"\n'
            + hook("b", "y = 20") + hook("z", "y = 26") + hook("first", "y = 0", 'before = "a"\n')
            + hook("mid", "y = 15", 'after = "a"\n'))
    spec = load_spec(child(tmp_path, text))
    assert [(h.name, h.code) for h in spec.hooks] == [("first", "y = 0"), ("a", "y = 1"), ("mid", "y = 15"),
                                                      ("b", "y = 20"), ("z", "y = 26")]
    assert [h.name for h in spec.pins] == ["p1"] and spec.outputs == ("out",)
    # [target.smoke] merges key by key: the child's module, the skeleton's objectives
    assert (spec.smoke.module, spec.smoke.objectives) == ("m", ("upstream", "clip_t"))
    assert Path(spec.hooks[1].origin).name == "_base.toml" and Path(spec.hooks[3].origin).name == "child.toml"
    # an inherited entry moves when the child restates it with a position
    moved = load_spec(child(tmp_path, 'extends = "fam/_base.toml"\n' + CHILD_TARGET + hook("c", "y = 3", 'before = "a"\n')))
    assert [h.name for h in moved.hooks] == ["c", "a", "b"]


@pytest.mark.parametrize("text,message", [
    ('extends = "fam/_base.toml"\ndrop = ["nope"]\n' + CHILD_TARGET, "drop 'nope': no inherited hook or pin"),
    ('extends = "fam/_base.toml"\n' + CHILD_TARGET + hook("n", "y = 0", 'before = "nope"\n'), "before = 'nope' names no hook"),
    ('extends = "fam/_base.toml"\n' + CHILD_TARGET + hook("n", "y = 0", 'before = "a"\nafter = "b"\n'), "not both"),
    ('extends = "fam/_missing.toml"\n' + CHILD_TARGET, "which is in neither its folder nor one above it"),
    ('extends = "fam/child.toml"\n' + CHILD_TARGET, "only skeletons"),
    ('drop = ["a"]\n' + CHILD_TARGET, "`drop` needs `extends`"),
    ('extends = "fam/_base.toml"\n' + CHILD_TARGET.replace('name = "t"\n', ''), r"\[target\] lacks name"),
    ('extends = "fam/_base.toml"\n' + CHILD_TARGET + 'flags = ["otca_w_min"]\n', "otca_w_min are not target-only flags"),
    ('extends = "fam/_base.toml"\n' + CHILD_TARGET + 'output = ["x"]\n', r"unknown keys \['output'\]"),
])
def test_a_wrong_extension_is_an_error_naming_the_spec(tmp_path, text, message):
    with pytest.raises(ValueError, match=message) as caught:
        load_spec(child(tmp_path, text))
    assert "child.toml" in str(caught.value)


def test_a_skeleton_names_no_target_and_extends_cannot_loop(tmp_path):
    named = SKELETON.replace('upstream = "U"', 'upstream = "U"\nname = "x"')
    with pytest.raises(ValueError, match="a skeleton .* sets no name"):
        load_spec(child(tmp_path, 'extends = "fam/_base.toml"\n' + CHILD_TARGET, named))
    looping = child(tmp_path, 'extends = "fam/_base.toml"\n' + CHILD_TARGET, 'extends = "fam/_base.toml"\n' + SKELETON)
    with pytest.raises(ValueError, match="`extends` loops"):
        load_spec(looping)


def test_an_old_format_runtime_module_is_refused_with_the_new_form(tmp_path):
    text = SKELETON.replace("otca_patch.targets.dancegrpo:GrpoRuntime", "otca_patch.targets.dancegrpo_flux")
    with pytest.raises(ValueError, match=r'runtime must name the runtime class as "module:Class".*docs/spec-format.md'):
        load_spec(child(tmp_path, 'extends = "fam/_base.toml"\n' + CHILD_TARGET, text))


def _content_lines(path: Path) -> list[str]:
    """The spec's lines, comments and blank lines aside."""
    return [line.rstrip() for line in path.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]


def longest_shared_run(a: list[str], b: list[str]) -> int:
    best, previous = 0, [0] * (len(b) + 1)
    for i in range(1, len(a) + 1):
        current = [0] * (len(b) + 1)
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def test_the_run_counter_counts_a_shared_run():
    assert longest_shared_run(["x", "a", "b", "c", "y"], ["a", "b", "c", "z"]) == 3
    assert longest_shared_run(["a", "b"], ["b", "a"]) == 1


def test_no_two_spec_files_share_a_run_of_more_than_20_lines():
    files = sorted(PACKAGED_PATCHES_DIR.rglob("*.toml"))
    assert len(files) >= 10
    lines = {path: _content_lines(path) for path in files}
    shared = {(a.name, b.name): longest_shared_run(lines[a], lines[b]) for a, b in itertools.combinations(files, 2)}
    too_long = {pair: run for pair, run in shared.items() if run > 20}
    assert not too_long, f"spec files repeating more than 20 lines (move them into a skeleton): {too_long}"
