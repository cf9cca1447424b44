"""The plug-in on VeRL-Omni's real code (run by ``scripts/check_upstream_env.sh verl-omni`` in its
environment): the docs' lines register the estimators through VeRL-Omni's registry, the real
``MultiVisualRewardManager`` scores a batch shaped as VeRL-Omni's rollout shapes it, the v1 trainer's own
advantage block and the Ray trainer's ``compute_advantage`` credit it, and the credit equals the engine's
(recomputed here from the images and latents) and, with one objective and TCD off, VeRL-Omni's ``flow_grpo``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import MagicMock

import numpy as np
import pytest
import torch
import verl_omni
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl import DataProto
from verl.utils.import_utils import import_external_libs
from verl_omni.reward_loop.reward_manager.multi import MultiVisualRewardManager
from verl_omni.trainer.diffusion import diffusion_algos, ray_diffusion_trainer
from verl_omni.trainer.diffusion.v1 import trainer_base

import image_rewards
from otca_patch.credit import CreditConfig, compute_credit
from otca_patch.runlog import LOG_NAME

pytestmark = pytest.mark.upstream
REWARDS_FILE = str(Path(image_rewards.__file__).resolve())
CONFIG_DIR = str(Path(verl_omni.__file__).parent / "trainer" / "config")
GROUPS, GROUP_SIZE, STEPS = 3, 3, 4
#: the docs' lines (docs/verl-omni.md), as Hydra overrides of VeRL-Omni's diffusion_trainer config
DOCS_LINES = ["actor_rollout_ref.model.external_lib=otca_patch.verl_omni", "algorithm.adv_estimator=otca"]

import_external_libs("otca_patch.verl_omni")  # as VeRL-Omni loads actor_rollout_ref.model.external_lib


def run_config(tmp_path, overrides=(), functions=None):
    """VeRL-Omni's own diffusion_trainer config, composed by Hydra with the docs' lines and ``overrides``."""
    functions = functions if functions is not None else {
        "bright": {"path": REWARDS_FILE, "name": "brightness", "weight": 0.7, "required": True},
        "contrast": {"path": REWARDS_FILE, "name": "contrast", "weight": 0.3, "required": True},
    }
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="diffusion_trainer",
                         overrides=[*DOCS_LINES, f"+algorithm.otca.log_dir={tmp_path / 'otca_logs'}", *overrides])
    config.reward.reward_functions = OmegaConf.create(functions)
    config.reward.reward_model.enable = False
    return config


def rollout(seed=0, steps=STEPS):
    """Images, SDE-window latents and uids as VeRL-Omni's rollout shapes them."""
    generator = torch.Generator().manual_seed(seed)
    size = GROUPS * GROUP_SIZE
    images = torch.randint(256, (size, 3, 8, 8), dtype=torch.uint8, generator=generator)
    latents = torch.randn(size, steps + 1, 4, 2, 2, generator=generator)
    uids = np.array([f"prompt-{i // GROUP_SIZE}" for i in range(size)], dtype=object)
    return images, latents, uids


def scored_batch(config, images, latents, uids, extra=None):
    """The batch after VeRL-Omni's reward step: the real reward manager scores each sample (run_single), and
    the outputs are assembled as verl's reward loop assembles them (rm_scores, reward_extra_keys)."""
    manager = MultiVisualRewardManager(config, MagicMock(), compute_score=None)
    outputs = []
    for i, image in enumerate(images):
        item = DataProto.from_dict(tensors={"responses": image[None]},
                                   non_tensors={"data_source": ["test"], "reward_model": [{"ground_truth": ""}],
                                                "extra_info": [dict((extra or {}).get(i, {}))]})
        outputs.append(manager.loop.run_until_complete(manager.run_single(item)))
    keys = list(outputs[0]["reward_extra_info"])
    size, steps = latents.shape[0], latents.shape[1] - 1
    return DataProto.from_dict(
        tensors={"rm_scores": manager.assemble_rm_scores(None, [o["reward_score"] for o in outputs]),
                 "old_log_probs": torch.zeros(size, steps), "all_latents": latents,
                 "all_timesteps": torch.linspace(1, 0, steps).expand(size, steps).clone()},
        non_tensors={"uid": uids, **{k: np.array([o["reward_extra_info"][k] for o in outputs]) for k in keys}},
        meta_info={"reward_extra_keys": keys})


def v1_advantages(config, data):
    """The v1 trainer's own advantage block (PolicyGradientDiffusionTrainerV1._compute_advantage)."""
    out = trainer_base.PolicyGradientDiffusionTrainerV1._compute_advantage(SimpleNamespace(config=config), data)
    return out.batch["advantages"]


def ray_advantages(config, data):
    """The Ray trainer's advantage block: the batch keys fit() sets, then its compute_advantage call."""
    data.batch["sample_level_scores"] = data.batch["rm_scores"]
    data.non_tensor_batch.update({k: data.non_tensor_batch[k] for k in data.meta_info["reward_extra_keys"]})
    data.batch["sample_level_rewards"] = data.batch["sample_level_scores"].expand(-1, data.batch["old_log_probs"].shape[1])
    out = ray_diffusion_trainer.compute_advantage(
        data, adv_estimator=config.algorithm.adv_estimator,
        norm_adv_by_std_in_grpo=config.algorithm.get("norm_adv_by_std_in_grpo", True),
        global_std=config.algorithm.global_std, config=config.algorithm)
    return out.batch["advantages"]


def engine_advantages(rewards, latents, uids, config: CreditConfig, clip):
    """The engine on the same inputs, recomputed here: every sample T times (VeRL-Omni's std over [B, T])."""
    steps = latents.shape[1] - 1
    _, groups = np.unique(uids.astype(str), return_inverse=True)
    credit = compute_credit(torch.cat([r.expand(steps, -1) for r in rewards.split(1)]),
                            torch.cat([z.expand(steps, *z.shape[1:]) for z in latents.split(1)]),
                            torch.as_tensor(groups).repeat_interleave(steps), config)
    return credit.advantages[::steps].clamp(-clip, clip)


def read_log(tmp_path):
    return [json.loads(line) for line in (tmp_path / "otca_logs" / LOG_NAME).read_text().splitlines()]


def test_the_docs_lines_register_every_estimator_through_verl_omnis_registry(tmp_path):
    registry = diffusion_algos.DIFFUSION_ADV_ESTIMATOR_REGISTRY
    ours = {name for name in registry if name.startswith("otca")}
    assert ours == {"otca", "otca_moca", "otca_tcd", "otca_multi_grpo", "otca_gdpo", "otca_sum"}
    assert all(registry[name].__module__ == "otca_patch.verl_omni.estimator" for name in ours)
    assert registry["flow_grpo"] is diffusion_algos.compute_flow_grpo_outcome_advantage
    assert trainer_base.compute_advantage is ray_diffusion_trainer.compute_advantage  # both trainers: one wrapper
    wrapped = ray_diffusion_trainer.compute_advantage.__otca_verl_omni_wraps__
    assert wrapped.__code__.co_filename == ray_diffusion_trainer.__file__
    config = run_config(tmp_path)
    assert config.algorithm.adv_estimator == "otca"
    assert diffusion_algos.get_diffusion_adv_estimator_fn(config.algorithm.adv_estimator) is registry["otca"]
    import_external_libs("otca_patch.verl_omni")  # loaded again (every worker imports it): nothing changes
    assert {name for name in registry if name.startswith("otca")} == ours


@pytest.mark.parametrize("trainer", [v1_advantages, ray_advantages])
def test_a_rollout_batch_gets_the_engines_credit(tmp_path, trainer):
    config = run_config(tmp_path)
    images, latents, uids = rollout(seed=1)
    data = scored_batch(config, images, latents, uids)
    advantages = trainer(config, data)
    rewards = image_rewards.as_tensor_rewards(images, [image_rewards.brightness, image_rewards.contrast])
    clip = config.actor_rollout_ref.actor.diffusion_loss.adv_clip_max
    expected = engine_advantages(rewards, latents, uids, CreditConfig(objective_weights=(0.7, 0.3)), clip)
    assert advantages.shape == (GROUPS * GROUP_SIZE, STEPS) and advantages.dtype == torch.float32
    assert torch.allclose(advantages, expected, atol=1e-5), (advantages, expected)
    assert advantages.abs().max() > 0.1  # the credit is not all zero
    # the steps differ (TCD) and the samples differ within a group (MOCA)
    assert (advantages.std(dim=1) > 1e-4).any()
    record = read_log(tmp_path)[-1]
    assert record["objectives"] == ["bright", "contrast"] and record["estimator"] == "otca"
    assert torch.allclose(torch.tensor(record["rewards"], dtype=torch.float64), rewards, atol=1e-12)
    assert torch.allclose(torch.tensor(record["advantages"]), advantages, atol=1e-6)
    # from the log alone, the engine gives the same credit again (the credit can be recomputed from outside)
    from otca_patch.credit import credit_from_progress

    logged = credit_from_progress(torch.tensor(record["rewards"]).repeat_interleave(STEPS, 0),
                                  torch.tensor(record["delta_s"]).repeat_interleave(STEPS, 0),
                                  torch.tensor(record["group_ids"]).repeat_interleave(STEPS), CreditConfig(**record["config"]))
    assert torch.allclose(logged.advantages[::STEPS].clamp(-clip, clip), advantages, atol=1e-5)


def test_each_call_writes_a_run_log_record(tmp_path):
    config = run_config(tmp_path)
    for seed in (2, 3):
        v1_advantages(config, scored_batch(config, *rollout(seed=seed)))
    records = read_log(tmp_path)
    assert [r["step"] for r in records[-2:]] == [records[-2]["step"], records[-2]["step"] + 1]
    for name in ("rewards", "delta_s", "group_ids", "step_weights", "advantages", "config", "objectives"):
        assert name in records[-1]
    assert np.array(records[-1]["delta_s"]).shape == (GROUPS * GROUP_SIZE, STEPS)


@pytest.mark.parametrize("global_std, std_scope", [(True, "batch"), (False, "group")])
@pytest.mark.parametrize("estimator, options", [("otca_sum", []),
                                                ("otca", ["+algorithm.otca.w_min=1", "+algorithm.otca.explore=0"])])
def test_one_objective_without_tcd_equals_flow_grpo(tmp_path, global_std, std_scope, estimator, options):
    functions = {"bright": {"path": REWARDS_FILE, "name": "brightness", "weight": 1.0, "required": True}}
    images, latents, uids = rollout(seed=4)
    common = [f"algorithm.global_std={global_std}"]
    ours = run_config(tmp_path, [*common, f"algorithm.adv_estimator={estimator}", "+algorithm.otca.adv_eps=1e-4",
                                 f"+algorithm.otca.std_scope={std_scope}", *options], functions)
    theirs = run_config(tmp_path, [*common, "algorithm.adv_estimator=flow_grpo"], functions)
    got = v1_advantages(ours, scored_batch(ours, images, latents, uids))
    reference = v1_advantages(theirs, scored_batch(theirs, images, latents, uids))
    assert torch.allclose(got, reference, atol=1e-5), (got - reference).abs().max()
    assert reference.abs().max() > 0.5


@pytest.mark.parametrize("steps, top", [(1, 0.9999), (3, 1.1546)])
def test_verl_omnis_std_convention_bessel_over_the_repeated_rewards(tmp_path, steps, top):
    """The group [1, 2, 3]: std over its T-fold repeated rewards (Bessel 3T - 1), by hand: T = 1 gives
    1 / (1 + 1e-4) = 0.9999, T = 3 gives 1 / (sqrt(6 / 8) + 1e-4) = 1.1546 for the top sample."""
    config = run_config(tmp_path, ["algorithm.adv_estimator=otca_sum", "+algorithm.otca.adv_eps=1e-4",
                                   "+algorithm.otca.rewards=[upstream]"], functions={})
    data = DataProto.from_dict(tensors={"rm_scores": torch.tensor([[1.0], [2.0], [3.0]]),
                                        "old_log_probs": torch.zeros(3, steps),
                                        "all_latents": torch.randn(3, steps + 1, 4)},
                               non_tensors={"uid": np.array(["a", "a", "a"], dtype=object)},
                               meta_info={"reward_extra_keys": []})
    advantages = v1_advantages(config, data)
    assert advantages[2].tolist() == pytest.approx([top] * steps, abs=1e-4)
    assert advantages[0].tolist() == pytest.approx([-top] * steps, abs=1e-4)


def test_advantages_stay_within_adv_clip_max(tmp_path):
    config = run_config(tmp_path, ["actor_rollout_ref.actor.diffusion_loss.adv_clip_max=0.25"])
    advantages = v1_advantages(config, scored_batch(config, *rollout(seed=5)))
    assert advantages.abs().max() == pytest.approx(0.25)
    assert read_log(tmp_path)[-1]["clipped"] > 0


def test_a_missing_reward_key_stops_the_run_naming_it(tmp_path):
    config = run_config(tmp_path, ["+algorithm.otca.rewards=[bright,contrast]"])
    data = scored_batch(config, *rollout(seed=6))
    del data.non_tensor_batch["reward/contrast"]
    data.meta_info["reward_extra_keys"].remove("reward/contrast")
    with pytest.raises(ValueError, match=r"otca: reward/contrast is not in the batch \(its rewards: reward/bright, "
                                         r"reward/combined\)"):
        v1_advantages(config, data)


def test_a_sample_without_a_score_stops_the_run_never_counts_as_0(tmp_path):
    config = run_config(tmp_path)
    data = scored_batch(config, *rollout(seed=7))
    data.non_tensor_batch["reward/bright"] = np.array([0.5] * 4 + [None] + [0.5] * 4, dtype=object)
    with pytest.raises(ValueError, match=r"otca: sample 4 has no finite reward/bright \(got None\)"):
        v1_advantages(config, data)


def test_a_reward_that_verl_omni_would_score_0_on_failure_is_refused(tmp_path):
    functions = {"bright": {"path": REWARDS_FILE, "name": "sometimes_missing", "weight": 1.0}}
    config = run_config(tmp_path, functions=functions)
    data = scored_batch(config, *rollout(seed=8), extra={1: {"fail": True}})
    assert data.non_tensor_batch["reward/bright"][1] == 0.0  # VeRL-Omni's own behaviour: the failure scores 0
    with pytest.raises(ValueError, match=r"reward.reward_functions.bright.required is false"):
        v1_advantages(config, data)


def test_a_wrong_key_is_refused_naming_it(tmp_path):
    config = run_config(tmp_path, ["+algorithm.otca.w_mni=0.3"])
    with pytest.raises(ValueError, match=r"algorithm.otca.w_mni: unknown key; did you mean w_min\? \(the keys: rewards, log_dir, mode, w_min"):
        v1_advantages(config, scored_batch(config, *rollout(seed=9)))
    config = run_config(tmp_path, ["+algorithm.otca.w_min=2"])
    with pytest.raises(ValueError, match=r"algorithm.otca.w_min: must lie in \[0, 1\], got 2"):
        v1_advantages(config, scored_batch(config, *rollout(seed=9)))


def test_flow_grpo_runs_through_the_wrapper_untouched(tmp_path):
    config = run_config(tmp_path, ["algorithm.adv_estimator=flow_grpo"])
    images, latents, uids = rollout(seed=10)
    got = v1_advantages(config, scored_batch(config, images, latents, uids))
    original = ray_diffusion_trainer.compute_advantage.__otca_verl_omni_wraps__
    data = scored_batch(config, images, latents, uids)
    data.batch["sample_level_rewards"] = data.batch["rm_scores"].expand(-1, STEPS)
    reference = original(data, "flow_grpo", True, True, config.algorithm).batch["advantages"]
    assert torch.equal(got, reference)
    assert not (tmp_path / "otca_logs" / LOG_NAME).exists()


def test_the_estimator_outside_compute_advantage_is_refused():
    with pytest.raises(ValueError, match="otca: called without its batch"):
        diffusion_algos.get_diffusion_adv_estimator_fn("otca")(torch.zeros(3, 2), config=None, index=None)
