"""Targets (their specs) and the runtime base: target-only flags, working-directory outputs for A/B
copies, upstream's own reward columns, observe mode."""
from pathlib import Path

import pytest
import torch

from otca_patch.ab.workdir import cwd_outputs
from otca_patch.config import OtcaConfig
from otca_patch.objective_set import Objectives, UpstreamRewards
from otca_patch.targets.registry import runtime_for


def config(tmp_path, **fields):
    return OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs"), **fields)


def test_a_target_only_flag_is_refused_by_targets_that_do_not_take_it(tmp_path):
    assert runtime_for("dancegrpo-wan", config(tmp_path, otca_sync_grads=True)).config.otca_sync_grads
    with pytest.raises(ValueError, match=r"--otca_sync_grads: not a flag of target dancegrpo-flux"):
        runtime_for("dancegrpo-flux", config(tmp_path, otca_sync_grads=True))
    with pytest.raises(ValueError, match=r"--otca_video_frames: not a flag of target dancegrpo-flux"):
        runtime_for("dancegrpo-flux", config(tmp_path, otca_video_frames=8))
    runtime_for("dancegrpo-hunyuan", config(tmp_path, otca_video_frames=8))  # a video target takes it


def test_no_video_target_is_built_with_fewer_than_one_frame(tmp_path):
    """The configuration refuses it, so the video runtimes need no check of their own."""
    with pytest.raises(ValueError, match=r"^--otca_video_frames: give at least 1 frame per video, got 0$"):
        runtime_for("dancegrpo-hunyuan", config(tmp_path, otca_video_frames=0))


def test_targets_share_a_family_runtime_class_and_each_instance_knows_its_own_spec(tmp_path):
    flux, qwen = runtime_for("dancegrpo-flux", config(tmp_path)), runtime_for("dancegrpo-qwenimage", config(tmp_path))
    assert type(flux) is type(qwen) and type(flux).__name__ == "GrpoRuntime"
    assert (flux.spec.name, qwen.spec.name) == ("dancegrpo-flux", "dancegrpo-qwenimage")
    assert "target" not in vars(type(flux)), "no class-level target: several targets share the class"


def _checkout(tmp_path, *files):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    return tmp_path


def test_ab_outputs_come_from_the_spec_of_the_launched_trainer(tmp_path):
    checkout = _checkout(tmp_path / "DanceGRPO", "fastvideo/train_grpo_flux.py", "fastvideo/train_grpo_hunyuan.py")
    hunyuan = tmp_path / "hunyuan.sh"
    hunyuan.write_text("torchrun fastvideo/train_grpo_hunyuan.py --seed 1\n")
    assert cwd_outputs(checkout, hunyuan) == ["videos", "vq_reward.txt", "mq_reward.txt"]
    flux = tmp_path / "flux.sh"
    flux.write_text("torchrun fastvideo/train_grpo_flux.py --seed 1\n")
    # an empty placeholder for the path DanceGRPO and MixGRPO share: its content picks neither spec, so
    # both trainers' outputs are private (the snapshots' own files pick one: tests/upstream/test_mixgrpo_flux.py)
    assert cwd_outputs(checkout, flux) == ["images", "reward.txt", "data/outputs"]
    other = tmp_path / "other.sh"
    other.write_text("python somewhere_else.py\n")  # names no target: every target's outputs in the checkout
    assert set(cwd_outputs(checkout, other)) == {"images", "reward.txt", "videos", "vq_reward.txt", "mq_reward.txt",
                                                 "data/outputs"}
    with pytest.raises(ValueError, match="none of the targets' upstream files"):
        cwd_outputs(_checkout(tmp_path / "empty", "README.md"), other)


def test_upstream_columns_expand_and_are_read_by_key():
    columns = UpstreamRewards(columns=("vq", "mq", "ta"))
    objectives = Objectives(["upstream"], columns, {}, {}, "cpu")
    assert objectives.names == ("upstream.vq", "upstream.mq", "upstream.ta") and not objectives.needs_images
    upstream = {"vq": torch.tensor([1.0, 2.0]), "mq": torch.tensor([3.0, 4.0]), "ta": torch.tensor([5.0, 6.0])}
    picked = Objectives(["upstream.ta", "upstream.vq"], columns, {}, {}, "cpu")
    assert torch.equal(picked.matrix(upstream, None, []), torch.tensor([[5.0, 1.0], [6.0, 2.0]]))
    with pytest.raises(ValueError, match="upstream.xx is not a reward this trainer computes"):
        Objectives(["upstream.xx"], columns, {}, {}, "cpu")
    with pytest.raises(ValueError, match="repeat once expanded"):
        Objectives(["upstream", "upstream.vq"], columns, {}, {}, "cpu")
    with pytest.raises(ValueError, match="2 weights for 3 objective columns upstream.vq,upstream.mq,upstream.ta"):
        Objectives(["upstream"], columns, {}, {}, "cpu", weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="not registry objectives: clip_t"):
        Objectives(["upstream"], columns, {"clip_t": "/x"}, {}, "cpu")


def test_one_reward_trainers_offer_plain_upstream_only():
    one = Objectives(["upstream"], UpstreamRewards(), {}, {}, "cpu")
    assert torch.equal(one.matrix(torch.tensor([0.5, 0.25]), None, []), torch.tensor([[0.5], [0.25]]))
    with pytest.raises(ValueError, match="computed no reward"):
        one.matrix(None, None, [])


def test_observe_trains_upstreams_value_itself_and_otca_casts_to_it(tmp_path):
    upstream = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
    otca = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    observing = runtime_for("dancegrpo-flux", OtcaConfig(otca_observe=True, otca_log_dir=str(tmp_path)))
    assert observing.choose(otca, upstream) is upstream
    trained = runtime_for("dancegrpo-flux", config(tmp_path)).choose(otca, upstream)
    assert trained.dtype == torch.bfloat16 and torch.equal(trained, otca.to(torch.bfloat16))


def test_mixgrpo_objectives_and_weights_come_from_the_reward_models_upstream_built(tmp_path):
    """MixGRPO's own flags choose its reward models: the objectives and (unless given) their weights
    are bound at its first training step, from the ``reward_weights`` it passes ``train_one_step``."""
    from types import SimpleNamespace

    built = {"HPSClipRewardModel": 0.4, "ImageRewardModel": 0.2, "PickScoreRewardModel": 0.2, "UnifiedRewardModel": 0.2}
    aggr = SimpleNamespace(multi_reward_mix="advantage_aggr", trimmed_ratio=0.0)
    runtime = runtime_for("mixgrpo-flux", config(tmp_path))
    assert "each reward model MixGRPO builds" in runtime.describe()
    runtime.bind_upstream_rewards(built, aggr)
    assert runtime.objectives.names == tuple(f"upstream.{name}" for name in built)
    assert runtime.credit_config.objective_weights == (0.4, 0.2, 0.2, 0.2)
    named = tuple(f"upstream.{name}" for name in ("PickScoreRewardModel", "HPSClipRewardModel"))
    given = runtime_for("mixgrpo-flux", config(tmp_path, otca_rewards=named, otca_objective_weights=(1.0, 3.0)))
    given.bind_upstream_rewards(built, aggr)
    assert given.objectives.names == named and given.credit_config.objective_weights == (1.0, 3.0)
    summed = runtime_for("mixgrpo-flux", config(tmp_path))
    summed.bind_upstream_rewards(built, SimpleNamespace(multi_reward_mix="reward_aggr", trimmed_ratio=0.0))
    assert summed.objectives.names == ("upstream",) and summed.credit_config.objective_weights is None
    with pytest.raises(ValueError, match="upstream.CLIPScoreRewardModel is not a reward this trainer computes"):
        picked = runtime_for("mixgrpo-flux", config(tmp_path, otca_rewards=("upstream.CLIPScoreRewardModel",)))
        picked.bind_upstream_rewards(built, aggr)


def test_the_run_log_names_the_spec_once(tmp_path):
    """One record of the spec (docs/run-log.md): no second ``target`` field repeating it."""
    import json

    from otca_patch.runlog import LOG_NAME
    from otca_patch.targets.registry import spec_named

    runtime = runtime_for("dancegrpo-flux", config(tmp_path))
    runtime.record = {"summary": {}}
    assert runtime.write_record()
    [line] = (tmp_path / "logs" / LOG_NAME).read_text().splitlines()
    record = json.loads(line)
    spec = spec_named("dancegrpo-flux")
    assert "target" not in record
    assert record["spec"] == {"target": "dancegrpo-flux", "upstream": "DanceGRPO", "file": "fastvideo/train_grpo_flux.py",
                              "path": spec.path, "extends": list(spec.extends), "chosen": ""}
    assert [Path(p).name for p in record["spec"]["extends"]] == ["_flux_probe.toml", "_flux_family.toml", "_dancegrpo.toml"]
