"""``--otca_final_state`` (spec 1.7): which runtimes accept ``prediction``, and how the FLUX runtime
hands the collected predictions to TCD."""
import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.credit import similarity_to_final
from otca_patch.targets.registry import runtime_for


def config(tmp_path, final_state):
    return OtcaConfig(otca=True, otca_final_state=final_state, otca_log_dir=str(tmp_path))


@pytest.mark.parametrize("target", ["dancegrpo-hunyuan", "dancegrpo-wan", "flowgrpo-sd3"])
def test_runtimes_without_the_sampler_hook_refuse_prediction(tmp_path, target):
    with pytest.raises(ValueError, match=rf"^--otca_final_state: not a flag of target {target}\b"):
        runtime_for(target, config(tmp_path, "prediction"))


def test_flux_uses_the_collected_predictions_as_the_final_state(tmp_path):
    runtime = runtime_for("dancegrpo-flux", config(tmp_path, "prediction"))
    latents = torch.randn(4, 5, 3, 8)  # B=4 samples, S+1=5 states, packed [tokens, channels]
    predictions = torch.randn(4, 3, 8)
    for chunk in predictions.split(1):  # upstream samples one prompt-sample at a time
        runtime.collect_final_prediction(chunk)
    torch.testing.assert_close(runtime.final_state(latents), predictions)
    expected = torch.nn.functional.cosine_similarity(
        torch.cat([latents[:, :-1], predictions[:, None]], 1).flatten(2), predictions.flatten(1)[:, None], dim=-1)
    got = similarity_to_final(latents, final=runtime.final_state(latents))
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    runtime.reset()  # a new training step forgets the previous rollout's predictions
    with pytest.raises(RuntimeError, match="collect_final_prediction gave None"):
        runtime.final_state(latents)
    runtime.collect_final_prediction(predictions[:3])
    with pytest.raises(RuntimeError, match=r"gave \(3, 3, 8\) for latents of one state \(4, 3, 8\)"):
        runtime.final_state(latents)


def test_latent_is_the_default_and_collects_nothing(tmp_path):
    runtime = runtime_for("dancegrpo-flux", config(tmp_path, "latent"))
    assert OtcaConfig().otca_final_state == "latent"
    runtime.collect_final_prediction(torch.randn(1, 3, 8))
    assert runtime.final_predictions == [] and runtime.final_state(torch.randn(1, 5, 3, 8)) is None
