"""The SDE-window runtime's own mechanics, without upstream: the sampler's steps recorded through the
module global its pipeline calls, the window the trainer keeps located in that trajectory (or a
PatchError), and each trained column's advantage read at step start + j of the whole-trajectory credit."""
import types

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.hooks.errors import PatchError
from otca_patch.credit import credit_from_progress, similarity_to_final, step_progress
from otca_patch.targets.flowgrpo import upstream_rewards
from otca_patch.targets.registry import runtime_for

STEPS, WIDTH = 5, 2


def fake_sampler(start: int):
    """A pipeline function in its own module, as upstream's: S steps through the module's
    ``sde_step_with_logprob``, returning only the window's W + 1 states (as the Fast pipelines)."""
    module = types.ModuleType("fake_pipeline")

    def sde_step_with_logprob(scheduler, model_output, timestep, sample, noise_level=0.0):
        return sample * 0.5 + model_output, torch.zeros(sample.shape[0]), None, None

    source = (
        "def pipeline_with_logprob(latents, steps, start, width):\n"
        "    kept = []\n"
        "    for i in range(steps):\n"
        "        if i == start:\n"
        "            kept.append(latents)\n"
        "        latents = sde_step_with_logprob(None, torch.ones_like(latents) * (i + 1), i, latents)[0]\n"
        "        if start <= i < start + width:\n"
        "            kept.append(latents)\n"
        "    return kept\n")
    module.__dict__.update(torch=torch, sde_step_with_logprob=sde_step_with_logprob)
    exec(compile(source, "fake_pipeline.py", "exec"), module.__dict__)
    return module


@pytest.fixture
def runtime(tmp_path):
    runtime = runtime_for("flowgrpo-flux-fast", OtcaConfig(otca=True, otca_log_dir=str(tmp_path),
                                                         otca_rewards=("jpeg_compressibility",)))
    runtime.bind_objectives(upstream_rewards({"jpeg_compressibility": 1.0}), "cpu")
    return runtime


def test_the_window_is_located_in_the_recorded_trajectory(runtime):
    module = fake_sampler(start=2)
    watched = runtime.watch_rollout(module.pipeline_with_logprob)
    latents = torch.randn(3, 4)
    kept = torch.stack(watched(latents, STEPS, 2, WIDTH), dim=1)
    assert module.sde_step_with_logprob.__name__ == "sde_step_with_logprob"  # restored after the call
    runtime.collect_rollout(torch.rand(3, 3, 4, 4), ["a"] * 3, kept)
    trajectory, start = runtime.rollouts[0]
    assert trajectory.shape == (3, STEPS + 1, 4) and torch.equal(trajectory[:, 0], latents)
    assert start.tolist() == [2, 2, 2]


def test_states_that_are_no_window_of_the_trajectory_stop_the_run(runtime):
    module = fake_sampler(start=1)
    watched = runtime.watch_rollout(module.pipeline_with_logprob)
    kept = torch.stack(watched(torch.randn(2, 4), STEPS, 1, WIDTH), dim=1)
    with pytest.raises(PatchError, match="window_in_trajectory.*match 0 windows"):
        runtime.collect_rollout(torch.rand(2, 3, 4, 4), ["a"] * 2, kept + 1e-3)


def test_a_pipeline_module_without_the_step_function_is_refused(runtime):
    module = fake_sampler(start=0)
    del module.sde_step_with_logprob
    with pytest.raises(PatchError, match="no sde_step_with_logprob to watch"):
        runtime.watch_rollout(module.pipeline_with_logprob)


def test_each_trained_column_reads_its_window_step_of_the_whole_trajectory_credit(runtime):
    starts = (0, 3)  # two sampling batches, two windows
    latents = [torch.randn(2, 4), torch.randn(2, 4)]
    for start, first in zip(starts, latents):
        watched = runtime.watch_rollout(fake_sampler(start).pipeline_with_logprob)
        kept = torch.stack(watched(first, STEPS, start, WIDTH), dim=1)
        runtime.collect_rollout(torch.rand(2, 3, 4, 4), ["a"] * 2, kept)
    trajectories = torch.cat([t for t, _ in runtime.rollouts])
    rewards = torch.tensor([0.1, 0.4, 0.3, 0.9])
    samples = {"advantages": torch.zeros(4, WIDTH), "latents": trajectories[:, :WIDTH],
               "rewards": {"jpeg_compressibility": rewards, "avg": rewards, "ori_avg": rewards}}
    trained = runtime.assign_advantages(samples, types.SimpleNamespace(per_prompt_stat_tracking=False), None, WIDTH)
    delta_s = torch.cat([step_progress(similarity_to_final(t[None]).double()) for t in trajectories])
    credit = credit_from_progress(rewards[:, None].double(), delta_s, torch.zeros(4, dtype=torch.long),
                                  runtime.credit_config)
    columns = torch.tensor([[0, 1], [0, 1], [3, 4], [3, 4]])
    assert torch.allclose(trained.double(), credit.advantages.double().gather(1, columns), atol=1e-6)
    assert runtime.record["advantage_steps"].tolist() == columns.tolist()
