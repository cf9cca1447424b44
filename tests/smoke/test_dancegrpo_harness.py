"""A DanceGRPO trainer is smoke-run from its spec's ``[target.smoke]`` table: the family's harness
(``harness = "dancegrpo"``, inherited from the FLUX skeleton), the tiny model, the sizes and upstream
arguments the trainer adds, merged key by key over its skeleton's. A trainer that follows its family
costs its spec alone (tests/upstream/test_dancegrpo_newcomer.py trains one)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from otca_patch.hooks.spec import PACKAGED_PATCHES_DIR, load_spec, load_specs
from otca_patch.smoke import dancegrpo
from otca_patch.smoke.cli import smoke_module, smoke_targets

REPO = Path(__file__).resolve().parents[2]

#: a copy of DanceGRPO's FLUX trainer, registered the way a newcomer would: its spec, nothing else
NEW_TRAINER = textwrap.dedent('''\
    extends = "dancegrpo/_flux_family.toml"

    [target]
    name = "dancegrpo-flux-newcomer"
    file = "fastvideo/train_grpo_flux_newcomer.py"
    verified_commit = "15cc71d53cc2e6e18a68ee607d5fb6ba9a99e344"
    verified_sha256 = "1b9ba86bf9ad6b384c996cd9fad0244bbc19b7c0a3fe0ac33793545bf2f9a91b"
''')


def newcomer(tmp_path, text=NEW_TRAINER) -> Path:
    """The shipped specs copied, with the newcomer's spec beside them."""
    patches = tmp_path / "patches"
    shutil.copytree(PACKAGED_PATCHES_DIR, patches)
    (patches / "dancegrpo" / "train_grpo_flux_newcomer.toml").write_text(text)
    return patches


def test_a_trainer_that_follows_the_flux_family_inherits_its_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("OTCA_PATCHES_DIR", str(newcomer(tmp_path)))
    spec, smoke = smoke_targets()["dancegrpo-flux-newcomer"]
    assert (smoke.harness, smoke.model, smoke.file) == ("dancegrpo", "flux", "fastvideo/train_grpo_flux_newcomer.py")
    sizes = smoke_module("dancegrpo-flux-newcomer", smoke).Sizes(num_generations=6, clip_range=0.2)
    args = dancegrpo.trainer("dancegrpo-flux-newcomer", smoke).upstream_args(sizes)
    # the family's arguments and the FLUX skeleton's, each size filled in
    assert (args.num_generations, args.gradient_accumulation_steps, args.clip_range) == (6, 6, 0.2)
    assert (args.use_hpsv2, args.use_pickscore, args.t, args.w) == (True, False, 1, sizes.image_size)


def test_a_trainer_s_sizes_and_arguments_merge_over_its_skeleton_s_key_by_key(tmp_path):
    text = NEW_TRAINER + '\n[target.smoke]\nmodel = "flux_lora"\nsizes = {lora_rank = 2}\noverrides = {use_hpsv3 = false}\n'
    smoke = load_spec(newcomer(tmp_path, text) / "dancegrpo" / "train_grpo_flux_newcomer.toml").smoke
    assert smoke.sizes == {"clip_range": 1e-4, "adv_clip_max": 5.0, "lora_rank": 2}
    assert smoke.overrides["use_hpsv3"] is False and smoke.overrides["clip_range"] == "{clip_range}"
    args = dancegrpo.trainer("x", smoke).upstream_args(dancegrpo.trainer("x", smoke).sizes())
    assert (args.use_hpsv3, args.adv_clip_max) == (False, 5.0)


@pytest.mark.parametrize("table,message", [
    ('model = "flux2"\n', "model must be one of flux, flux_lora, .*got 'flux2'"),
    ('overrides = {cfg_infer = "{cfg}"}\n', "overrides name sizes it does not have: cfg"),
])
def test_a_model_or_size_the_harness_lacks_is_refused_in_one_line(tmp_path, table, message):
    smoke = load_spec(newcomer(tmp_path, NEW_TRAINER + "\n[target.smoke]\n" + table)
                      / "dancegrpo" / "train_grpo_flux_newcomer.toml").smoke
    with pytest.raises(ValueError, match=f"target dancegrpo-flux-newcomer: .*{message}"):
        dancegrpo.trainer("dancegrpo-flux-newcomer", smoke)


def test_every_shipped_dancegrpo_trainer_with_train_one_step_runs_through_the_family_harness():
    dance = {spec.name: spec for spec in load_specs() if spec.upstream.startswith("DanceGRPO") and spec.smoke.runs}
    modules = {name for name, spec in dance.items() if spec.smoke.module}
    assert modules == {"dancegrpo-sd"}, modules  # its loops live in main: a module of its own
    for name, spec in dance.items():
        if name in modules:
            continue
        trainer = dancegrpo.trainer(name, spec.smoke)
        assert trainer.smoke.file == spec.file and trainer.model is dancegrpo.MODELS[spec.smoke.model]
        assert vars(trainer.upstream_args(trainer.sizes())).keys() >= dancegrpo.BASE_ARGS.keys()
