"""``--otca_objective_weights`` addresses the columns the run lists once names expand
(``upstream`` -> upstream.vq, upstream.mq, upstream.ta; ``videoalign`` -> videoalign.vq, ...)."""
import pytest
import torch

from otca_patch.config import OtcaConfig, parse_otca_args
from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.objective_set import Objectives, UpstreamRewards
from otca_patch.rewards import registry
from otca_patch.rewards.base import RewardModel
from otca_patch.targets.dancegrpo_hunyuan import HunyuanRuntime

HUNYUAN = UpstreamRewards(columns=("vq", "mq", "ta"))


class FakeVideoAlign(RewardModel):
    """Three columns per video, as VideoAlign's adapter: VQ = mean brightness, MQ = its std, TA = 0.5."""

    name, output_names, modality = "videoalign", ("videoalign.vq", "videoalign.mq", "videoalign.ta"), "video"

    def __init__(self, checkpoint=None, device="cpu", dtype=torch.float32):
        super().__init__(device, dtype)

    def _score_all(self, videos, prompts):
        flat = videos.flatten(1)
        return torch.stack([flat.mean(1), flat.std(1), torch.full_like(flat[:, 0], 0.5)], dim=1)

    def _score(self, videos, prompts):
        return self._score_all(videos, prompts).sum(1)


@pytest.fixture
def fake_videoalign(monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, "videoalign", FakeVideoAlign)


def hunyuan(tmp_path, argv):
    config, rest = parse_otca_args(["--otca", "--otca_log_dir", str(tmp_path / "logs"), *argv])
    assert rest == []
    return HunyuanRuntime(config)


def test_one_weight_for_a_name_that_expands_says_the_rule(tmp_path):
    with pytest.raises(ValueError) as raised:
        hunyuan(tmp_path, ["--otca_rewards", "upstream", "--otca_objective_weights", "1"])
    message = str(raised.value)
    assert "1 weights for 3 objective columns upstream.vq,upstream.mq,upstream.ta" in message
    assert "(upstream = upstream.vq,upstream.mq,upstream.ta)" in message
    assert "one weight per objective column" in message


def test_weights_of_expanded_columns_are_accepted_and_used(tmp_path):
    runtime = hunyuan(tmp_path, ["--otca_rewards", "upstream", "--otca_objective_weights", "1,0,0",
                                 "--otca_mode", "multi_grpo"])
    assert runtime.objectives.names == ("upstream.vq", "upstream.mq", "upstream.ta")
    assert runtime.credit_config.objective_weights == (1.0, 0.0, 0.0)
    rewards = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    local, _ = runtime.credit(rewards, torch.rand(8, 4, dtype=torch.float64), torch.arange(8) // 4)
    vq = rewards[:, 0].reshape(2, 4).double()
    expected = ((vq - vq.mean(1, keepdim=True)) / (vq.std(1, keepdim=True) + 1e-8)).reshape(-1)
    assert torch.allclose(local["combined"].double(), expected, atol=1e-6)  # MQ and TA weigh nothing


def test_fewer_weights_than_names_stops_at_parse_time():
    with pytest.raises(ValueError, match="1 weights for 2 objectives .*one weight per objective column"):
        OtcaConfig(otca_rewards=("upstream", "clip_t"), otca_objective_weights=(1.0,))


def test_registry_videoalign_columns_can_be_weighted(fake_videoalign):
    objectives = Objectives(["upstream.vq", "videoalign"], HUNYUAN, {}, {}, "cpu", weights=(1.0, 0.0, 2.0, 0.5))
    assert objectives.names == ("upstream.vq", "videoalign.vq", "videoalign.mq", "videoalign.ta")
    assert objectives.columns_of["videoalign"] == ["videoalign.vq", "videoalign.mq", "videoalign.ta"]
    videos = torch.rand(4, 2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    matrix = objectives.matrix({"vq": torch.arange(4.0)}, list(videos), ["p"] * 4)
    assert matrix.shape == (4, 4)
    weights = CreditConfig(mode="multi_grpo", objective_weights=(1.0, 0.0, 2.0, 0.5))
    combined = credit_from_progress(matrix, torch.rand(4, 3), torch.zeros(4, dtype=torch.long), weights).combined
    normalised = (matrix - matrix.mean(0)) / (matrix.std(0) + 1e-8)
    normalised[:, 3] = 0  # a constant column has no advantage
    assert torch.allclose(combined.double(), (normalised.double() * torch.tensor([1.0, 0.0, 2.0, 0.5],
                                                                                   dtype=torch.float64)).sum(1),
                          atol=1e-5)


def test_videoalign_weights_counted_by_name_are_refused_naming_its_columns(fake_videoalign):
    with pytest.raises(ValueError, match=r"2 weights for 4 objective columns .*\(videoalign = "
                                         r"videoalign.vq,videoalign.mq,videoalign.ta\)"):
        Objectives(["upstream.vq", "videoalign"], HUNYUAN, {}, {}, "cpu", weights=(1.0, 1.0))


@pytest.mark.parametrize("weights, expected", [
    ((1e39, 1.0), "must be finite, >= 0 and at most 1e+20 (they scale the float32 advantages); index 0 is 1e+39"),
    ((1e308, 1e308), "index 0 is 1e+308"),
    ((float("inf"), 1.0), "index 0 is inf"),
    ((1.0, -0.5), "index 1 is -0.5"),
    ((0.0, 0.0), "all 2 are 0, so every advantage would be 0 and nothing would train"),
])
def test_weights_that_give_non_finite_or_zero_advantages_are_refused(weights, expected):
    with pytest.raises(ValueError) as raised:
        CreditConfig(objective_weights=weights)
    assert str(raised.value).startswith("objective_weights: ") and expected in str(raised.value)
    with pytest.raises(ValueError, match="^--otca_objective_weights: "):
        OtcaConfig(otca=True, otca_rewards=("upstream", "clip_t"), otca_objective_weights=weights)


@pytest.mark.parametrize("mode", ["otca", "moca", "tcd", "multi_grpo", "gdpo", "sum"])
def test_the_largest_weight_keeps_every_mode_finite(mode):
    from otca_patch.credit.config import MAX_OBJECTIVE_WEIGHT

    rewards = torch.randn(64, 3, generator=torch.Generator().manual_seed(2))
    config = CreditConfig(mode=mode, objective_weights=(MAX_OBJECTIVE_WEIGHT, 1.0, MAX_OBJECTIVE_WEIGHT))
    advantages = credit_from_progress(rewards, torch.rand(64, 10, dtype=torch.float64), torch.arange(64) // 8,
                                      config).advantages
    assert torch.isfinite(advantages).all() and advantages.abs().max() > 0


def test_the_engine_refuses_non_finite_advantages_instead_of_returning_them():
    """A config that escaped the checks (weights set after validation): the engine's output check stops it."""
    config = CreditConfig(mode="tcd")
    object.__setattr__(config, "objective_weights", (1e39, 1.0))  # beyond float32 once scaled
    rewards = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"^credit: \d+ of 32 advantages are not finite \(first: sample \d+, step \d+: "
                                         r"-?inf\) in mode tcd .*refusing to train on them"):
        credit_from_progress(rewards, torch.rand(8, 4, dtype=torch.float64), torch.arange(8) // 4, config)
