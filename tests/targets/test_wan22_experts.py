"""The Wan2.2 expert router on its own (no upstream): diffusers' switching rule, row routing,
loading the second expert, training one, saving both, and Wan2.1 left alone."""
import json

import pytest
import torch

from otca_patch.targets.wan22 import ExpertRouter, boundary_timestep, is_wan22_checkpoint, load_experts, save_experts
from otca_patch.targets.registry import runtime_for

import diffusers
from upstream_snapshots import missing


def tiny():
    if not hasattr(diffusers, "WanTransformer3DModel"):
        missing("diffusers < 0.35 has no WanTransformer3DModel")
    return diffusers.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                           in_channels=16, out_channels=16, text_dim=32, freq_dim=16, ffn_dim=32,
                                           num_layers=1, rope_max_seq_len=32)


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    for name in ("transformer", "transformer_2"):
        tiny().save_pretrained(str(tmp_path / name))
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(json.dumps({"num_train_timesteps": 1000}))
    (tmp_path / "model_index.json").write_text(json.dumps({
        "_class_name": "WanPipeline", "boundary_ratio": 0.875,
        "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": ["diffusers", "WanTransformer3DModel"]}))
    return tmp_path


def call(model, timesteps):
    torch.manual_seed(1)
    x, text = torch.randn(len(timesteps), 16, 1, 4, 4), torch.randn(len(timesteps), 8, 32)
    return model(hidden_states=x, timestep=torch.tensor(timesteps), encoder_hidden_states=text, return_dict=False)[0]


def test_boundary_and_detection_follow_the_checkpoint(checkpoint, tmp_path_factory):
    assert is_wan22_checkpoint(checkpoint) and boundary_timestep(checkpoint) == 875.0
    wan21 = tmp_path_factory.mktemp("wan21")
    (wan21 / "model_index.json").write_text(json.dumps({"transformer": ["diffusers", "WanTransformer3DModel"]}))
    assert not is_wan22_checkpoint(wan21) and not is_wan22_checkpoint(None)


def test_rows_go_to_the_expert_owning_their_timestep(checkpoint):
    router = load_experts(diffusers.WanTransformer3DModel.from_pretrained(str(checkpoint), subfolder="transformer"),
                          str(checkpoint))
    high, low = router.transformer, router.transformer_2
    assert router.expert_names(torch.tensor([1000, 875, 874, 0])) == ["transformer", "transformer", "transformer_2",
                                                                      "transformer_2"]
    mixed = call(router, [900, 500, 875])
    assert torch.allclose(mixed[[0, 2]], call(high, [900, 500, 875])[[0, 2]], atol=1e-6)
    assert torch.allclose(mixed[1], call(low, [900, 500, 875])[1], atol=1e-6)
    assert not torch.allclose(call(high, [500]), call(low, [500]))  # the experts differ


def test_only_the_chosen_expert_trains_and_both_are_saved(checkpoint, tmp_path):
    first = diffusers.WanTransformer3DModel.from_pretrained(str(checkpoint), subfolder="transformer")
    router = load_experts(first, str(checkpoint), train="transformer_2")
    assert not any(p.requires_grad for p in router.transformer.parameters())
    assert all(p.requires_grad for p in router.transformer_2.parameters())
    assert isinstance(router, ExpertRouter) and router.config == first.config
    save_experts(router, str(tmp_path / "out"))
    for name in ("transformer", "transformer_2"):
        again = diffusers.WanTransformer3DModel.from_pretrained(str(tmp_path / "out"), subfolder=name)
        for a, b in zip(again.parameters(), getattr(router, name).parameters()):
            assert torch.equal(a, b)


def test_the_wan_runtime_leaves_wan21_as_upstream_has_it(checkpoint, tmp_path):
    import argparse

    from safetensors.torch import load_file

    from otca_patch.config import OtcaConfig
    runtime = runtime_for("dancegrpo-wan", OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs")))
    model = tiny()
    wan21 = argparse.Namespace(pretrained_model_name_or_path=str(tmp_path / "no-index"))
    assert runtime.load_experts(model, wan21) is model and runtime.router is None
    runtime.save_transformer(model, model.state_dict(), str(tmp_path), str(tmp_path / "weights.safetensors"))
    saved = load_file(str(tmp_path / "weights.safetensors"))
    assert saved.keys() == model.state_dict().keys()
    strict = runtime_for("dancegrpo-wan", OtcaConfig(otca=True, otca_wan22=True, otca_log_dir=str(tmp_path / "logs")))
    with pytest.raises(ValueError, match="declares no transformer_2"):
        strict.load_experts(model, wan21)
    detected = runtime.load_experts(model, argparse.Namespace(pretrained_model_name_or_path=str(checkpoint)))
    assert isinstance(detected, ExpertRouter) and runtime.config.otca_wan22


def test_a_step_of_the_frozen_expert_backpropagates_and_trains_nothing(checkpoint):
    first = diffusers.WanTransformer3DModel.from_pretrained(str(checkpoint), subfolder="transformer")
    router = load_experts(first, str(checkpoint), train="transformer_2")
    call(router, [950]).square().mean().backward()  # upstream's loss.backward() on a high-noise step
    assert all(p.grad is None for p in router.parameters())
    call(router, [300]).square().mean().backward()
    assert all(p.grad is not None for p in router.transformer_2.parameters())
    assert all(p.grad is None for p in router.transformer.parameters())
