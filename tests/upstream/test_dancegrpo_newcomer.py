"""A DanceGRPO trainer that follows its family costs its spec alone: a copy of the FLUX trainer under a
new name, registered by the FLUX trainer's spec with only its name and file changed, is a smoke target
of the family's harness and trains with the layer exactly as the shipped FLUX trainer does."""
import shutil

from otca_patch.hooks.spec import PACKAGED_PATCHES_DIR

from .conftest import run_smoke


def newcomer_spec() -> str:
    """The shipped FLUX spec, renamed onto the copy: the FLUX skeleton's hook points, runtime and smoke."""
    text = (PACKAGED_PATCHES_DIR / "dancegrpo" / "train_grpo_flux.toml").read_text()
    renamed = text.replace('"dancegrpo-flux"', '"dancegrpo-flux-newcomer"').replace(
        "fastvideo/train_grpo_flux.py", "fastvideo/train_grpo_flux_newcomer.py")
    assert "[target.smoke]" not in renamed  # nothing of its own but its name and file
    return renamed


def test_a_copy_of_the_flux_trainer_registered_by_its_spec_alone_trains_with_the_layer(dancegrpo, tmp_path):
    checkout = tmp_path / "DanceGRPO"
    shutil.copytree(dancegrpo, checkout, symlinks=True)
    shutil.copy(checkout / "fastvideo" / "train_grpo_flux.py", checkout / "fastvideo" / "train_grpo_flux_newcomer.py")
    patches = tmp_path / "patches"
    shutil.copytree(PACKAGED_PATCHES_DIR, patches)
    (patches / "dancegrpo" / "train_grpo_flux_newcomer.toml").write_text(newcomer_spec())
    env = {"OTCA_PATCHES_DIR": str(patches), "OTCA_PATCH_ARGS": ""}
    runs = {target: run_smoke(checkout, tmp_path / target, "--target", target, "--steps", "1", "--otca", env=env)
            for target in ("dancegrpo-flux-newcomer", "dancegrpo-flux")}
    for target, run in runs.items():
        assert "smoke: passed" in run.completed.stdout
        assert run.log and all(record["spec"]["target"] == target for record in run.log)  # rewritten by its own spec
    # the same trainer, the same harness, the same numbers
    assert runs["dancegrpo-flux-newcomer"].result["steps"] == runs["dancegrpo-flux"].result["steps"]
