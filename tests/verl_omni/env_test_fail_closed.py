"""The plug-in refuses, at load and in one line, a VeRL-Omni that is not the one it was verified on: the
installed files (a copy of the package edited) and the live objects (a rebound compute_advantage)."""
from __future__ import annotations

import shutil

import pytest
import verl_omni  # noqa: F401
from verl_omni.trainer.diffusion import ray_diffusion_trainer

from otca_patch import verl_omni as plugin
from otca_patch.verl_omni import binding, contract

pytestmark = pytest.mark.upstream


def test_the_installed_verl_omni_holds_the_contract():
    assert contract.problems(binding.installed_root()) == []
    binding.verify()


def test_a_compute_advantage_with_a_new_parameter_stops_the_load(tmp_path, monkeypatch):
    copy = tmp_path / "site"
    shutil.copytree(binding.installed_root() / "verl_omni", copy / "verl_omni")
    trainer = copy / contract.TRAINER
    trainer.write_text(trainer.read_text().replace("    config: Optional[DiffusionAlgoConfig] = None,\n) -> DataProto:",
                                                   "    config: Optional[DiffusionAlgoConfig] = None,\n    weights=None,\n"
                                                   ") -> DataProto:", 1))
    monkeypatch.setattr(binding, "installed_root", lambda: copy)
    with pytest.raises(binding.ContractError) as raised:
        plugin.install()
    message = str(raised.value)
    assert "\n" not in message
    assert "compute_advantage's parameters are (data, adv_estimator, norm_adv_by_std_in_grpo, global_std, config, " \
           "weights); verified: (data, adv_estimator, norm_adv_by_std_in_grpo, global_std, config)" in message


def test_a_compute_advantage_rebound_elsewhere_stops_the_load(monkeypatch):
    def compute_advantage(data, adv_estimator, norm_adv_by_std_in_grpo=True, global_std=True, config=None):
        return data

    monkeypatch.setattr(ray_diffusion_trainer, "compute_advantage", compute_advantage)
    with pytest.raises(binding.ContractError, match=r"ray_diffusion_trainer.compute_advantage is not the function of "
                                                    r"verl_omni/trainer/diffusion/ray_diffusion_trainer.py"):
        plugin.install()


def test_a_registry_without_flow_grpo_stops_the_load(monkeypatch):
    from verl_omni.trainer.diffusion import diffusion_algos

    monkeypatch.setattr(diffusion_algos, "DIFFUSION_ADV_ESTIMATOR_REGISTRY", {})
    with pytest.raises(binding.ContractError, match="DIFFUSION_ADV_ESTIMATOR_REGISTRY is not the registry"):
        plugin.install()
