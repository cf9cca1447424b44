"""``--otca_objective_weights`` addresses the columns the run lists once names expand
(``upstream`` -> upstream.vq, upstream.mq, upstream.ta; ``videoalign`` -> videoalign.vq, ...)."""
import pytest
import torch

from otca_patch.config import OtcaConfig, parse_otca_args
from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.objective_set import Objectives, UpstreamRewards
from otca_patch.rewards import registry
from otca_patch.rewards.base import RewardModel
from otca_patch.targets.registry import runtime_for
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
    return runtime_for("dancegrpo-hunyuan", config)


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
