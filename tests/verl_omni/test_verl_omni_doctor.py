"""``otca-patch doctor`` on a VeRL-Omni checkout says whether the plug-in's contract holds: on the snapshot
it was verified on it does; on a copy whose ``compute_advantage`` gained a parameter, or whose reward
manager no longer writes ``reward/<key>``, it does not, naming what differs."""
from __future__ import annotations

import shutil

import pytest

from otca_patch import cli
from otca_patch.verl_omni import contract
from upstream_snapshots import missing, unpack_snapshot

pytestmark = pytest.mark.upstream
SNAPSHOT = "verl-omni-a1139ba.tar.gz"


@pytest.fixture(scope="module")
def checkout():
    root = unpack_snapshot(SNAPSHOT)
    if root is None:
        missing(f"no VeRL-Omni snapshot {SNAPSHOT}")
    return root


def copy_with(checkout, tmp_path, file, old, new):
    copy = tmp_path / "verl-omni"
    for part in ("verl_omni",):
        shutil.copytree(checkout / part, copy / part)
    path = copy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return copy


def test_the_verified_snapshot_holds(checkout, capsys):
    assert cli.main(["doctor", str(checkout)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("doctor: passed: 10 of 10 points")
    assert "DIFFERS" not in out


def test_compute_advantage_with_a_new_parameter_is_refused(checkout, tmp_path, capsys):
    copy = copy_with(checkout, tmp_path, contract.TRAINER, "    config: Optional[DiffusionAlgoConfig] = None,\n) -> DataProto:",
                     "    config: Optional[DiffusionAlgoConfig] = None,\n    step_weights=None,\n) -> DataProto:")
    assert cli.main(["doctor", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "compute_advantage's parameters are (data, adv_estimator, norm_adv_by_std_in_grpo, global_std, config, " \
           "step_weights)" in out
    assert out.strip().splitlines()[-1].startswith("doctor: failed: 9 of 10 points")


def test_a_reward_manager_that_writes_other_keys_is_refused(checkout, tmp_path):
    copy = copy_with(checkout, tmp_path, contract.MULTI_REWARD, 'reward_extra_info[f"reward/{key}"] = score',
                     'reward_extra_info[f"score/{key}"] = score')
    found = contract.problems(copy)
    assert len(found) == 1 and "MultiVisualRewardManager.run_single's code changed" in found[0]


def test_a_third_binding_of_compute_advantage_is_refused(checkout, tmp_path):
    copy = copy_with(checkout, tmp_path, "verl_omni/trainer/diffusion/v1/trainer_sync.py", "import ",
                     "from verl_omni.trainer.diffusion.ray_diffusion_trainer import compute_advantage\nimport ")
    found = contract.problems(copy)
    assert found == ["modules binding compute_advantage: also bound in verl_omni/trainer/diffusion/v1/trainer_sync.py "
                     "(the plug-in rebinds only verl_omni/trainer/diffusion/ray_diffusion_trainer.py, "
                     "verl_omni/trainer/diffusion/v1/trainer_base.py)"]


def test_docstrings_and_formatting_may_change(checkout, tmp_path):
    copy = copy_with(checkout, tmp_path, contract.TRAINER, '"""Compute advantage estimates for diffusion policy optimization.',
                     '"""Compute advantages (reworded).\n\n    Compute advantage estimates for diffusion policy optimization.')
    assert contract.problems(copy) == []
