"""Registry, checkpoint resolution and errors, offline loading, input checks, RewardSet."""
from __future__ import annotations

import shutil

import pytest
import torch

from rewards_fixtures import (IMAGE_REWARD_NAMES, NEEDS_IMAGEREWARD, PROMPTS, images, loaded_model,  # noqa: F401
                              network_calls, tiny_checkpoints)
from otca_patch import rewards
from otca_patch.rewards import CheckpointError, RewardSet, load
from otca_patch.rewards.preprocess import preprocess_images

# reward -> (env var, words the error must contain about the expected published file)
EXPECTED = {
    "clip_t": ("OTCA_CKPT_CLIP_T", "vit_large_patch14_clip_224.openai"),
    "hpsv2": ("OTCA_CKPT_HPSV2", "HPS_v2.1_compressed.pt from huggingface xswu/HPSv2"),
    "aesthetic": ("OTCA_CKPT_AESTHETIC", "sac+logos+ava1-l14-linearMSE.pth"),
    "pickscore": ("OTCA_CKPT_PICKSCORE", "yuvalkirstain/PickScore_v1"),
    "imagereward": ("OTCA_CKPT_IMAGEREWARD", "THUDM/ImageReward"),
    "videoalign": ("OTCA_CKPT_VIDEOALIGN", "KwaiVGI/VideoReward"),
}


def test_available_lists_every_adapter():
    assert rewards.available() == ["clip_t", "hpsv2", "aesthetic", "pickscore", "imagereward", "videoalign"]
    with pytest.raises(ValueError, match="unknown reward model 'nope'.*clip_t"):
        load("nope")


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "imagereward"]
                         + [pytest.param("imagereward", marks=NEEDS_IMAGEREWARD)])
def test_missing_checkpoint_error_names_model_path_and_expected_file(name, tmp_path, monkeypatch):
    env_var, expected = EXPECTED[name]
    monkeypatch.delenv(env_var, raising=False)
    missing = tmp_path / "nowhere" / "weights.bin"
    _, options = tiny_checkpoints()
    opts = {k: v for k, v in options.get(name, {}).items()}
    with pytest.raises(CheckpointError) as err:
        load(name, checkpoint=missing, **opts)
    msg = str(err.value)
    assert f"'{name}'" in msg and str(missing) in msg and expected in msg and env_var in msg
    with pytest.raises(CheckpointError, match=f"{env_var} is unset"):
        load(name, **opts)


@pytest.mark.parametrize("name", ["clip_t", "hpsv2", "aesthetic", pytest.param("imagereward", marks=NEEDS_IMAGEREWARD)])
def test_corrupt_file_error(name, tmp_path):
    checkpoints, options = tiny_checkpoints()
    src = checkpoints[name]
    if src.is_dir():  # imagereward: corrupt the .pt inside a copy of the folder
        bad_root = tmp_path / src.name
        shutil.copytree(src, bad_root)
        bad = bad_root / "ImageReward.pt"
    else:
        bad_root = bad = tmp_path / src.name
    bad.write_bytes(src.read_bytes() if not src.is_dir() else (src / "ImageReward.pt").read_bytes())
    with open(bad, "r+b") as f:  # truncate: the way an interrupted copy looks
        f.truncate(bad.stat().st_size // 2)
    with pytest.raises(CheckpointError) as err:
        load(name, checkpoint=bad_root, **options[name])
    msg = str(err.value)
    assert f"'{name}'" in msg and str(bad) in msg and "cannot read checkpoint" in msg
    assert EXPECTED[name][1] in msg


def test_wrong_file_error_names_the_mismatch(tmp_path):
    checkpoints, options = tiny_checkpoints()
    # An aesthetic head given where HPSv2 is expected: readable, but not the architecture.
    with pytest.raises(CheckpointError, match="'hpsv2'.*(does not fit|lacks)"):
        load("hpsv2", checkpoint=checkpoints["aesthetic"], **options["hpsv2"])
    with pytest.raises(CheckpointError, match="'aesthetic'.*not an aesthetic-head state dict"):
        load("aesthetic", checkpoint=checkpoints["hpsv2"], **options["aesthetic"])


def test_corrupt_pickscore_folder(tmp_path):
    checkpoints, options = tiny_checkpoints()
    bad = tmp_path / "PickScore_v1"
    shutil.copytree(checkpoints["pickscore"], bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match=r"'pickscore'.*cannot load the model.*PickScore_v1"):
        load("pickscore", checkpoint=bad, **options["pickscore"])


def test_checkpoints_from_environment(monkeypatch):
    checkpoints, options = tiny_checkpoints()
    monkeypatch.setenv("OTCA_CKPT_CLIP_T", str(checkpoints["clip_t"]))
    monkeypatch.setenv("OTCA_CKPT_HPSV2", str(checkpoints["hpsv2"]))
    monkeypatch.setenv("OTCA_CKPT_AESTHETIC", str(checkpoints["aesthetic"]))
    monkeypatch.setenv("OTCA_CKPT_AESTHETIC_CLIP", str(checkpoints["clip_t"]))
    opts = {"clip_t": options["clip_t"], "hpsv2": options["hpsv2"],
            "aesthetic": {"model_name": options["aesthetic"]["model_name"]}}
    rs = RewardSet(["clip_t", "hpsv2", "aesthetic"], options=opts)
    x = images(4)
    out = rs.score(x, PROMPTS)
    assert out.scores.shape == (4, 3) and out.scores.dtype == torch.float32
    assert out.names == ["clip_t", "hpsv2", "aesthetic"]
    for k, name in enumerate(out.names):
        assert torch.allclose(out.scores[:, k], loaded_model(name).score(x, PROMPTS))
    scores, names = out  # also unpacks as a 2-tuple
    assert names == rs.names


def test_reward_set_order_and_instances():
    models = [loaded_model("aesthetic"), loaded_model("clip_t")]
    rs = RewardSet(models)
    scores, names = rs.score(images(2), PROMPTS[:2])
    assert names == ["aesthetic", "clip_t"] and scores.shape == (2, 2)
    with pytest.raises(ValueError, match="duplicate"):
        RewardSet([loaded_model("clip_t"), loaded_model("clip_t")])
    with pytest.raises(ValueError, match="not in the set"):
        RewardSet([loaded_model("clip_t")], checkpoints={"hpsv2": "x"})


def test_loading_and_scoring_never_touch_the_network(network_calls):
    checkpoints, options = tiny_checkpoints()
    rs = RewardSet(IMAGE_REWARD_NAMES, checkpoints, options=options)
    out = rs.score(images(2), PROMPTS[:2])
    assert out.scores.shape == (2, len(IMAGE_REWARD_NAMES))
    assert network_calls == []


def test_network_guard_catches_a_download(network_calls):
    import huggingface_hub

    with pytest.raises(RuntimeError, match="network access attempted"):
        huggingface_hub.hf_hub_download("xswu/HPSv2", "HPS_v2.1_compressed.pt")
    assert network_calls == ["huggingface_hub.hf_hub_download"]


@pytest.mark.parametrize("bad, match", [
    (torch.rand(2, 4, 32, 32), r"\[B, 3, H, W\]"),
    (torch.rand(3, 32, 32), r"\[B, 3, H, W\]"),
    (torch.rand(2, 3, 32, 32) * 2 - 1, r"\[0, 1\]"),
    (torch.full((2, 3, 32, 32), float("nan")), "NaN"),
    (torch.randint(0, 255, (2, 3, 32, 32)), "float"),
    (torch.zeros(0, 3, 32, 32), "empty"),
    ("image.png", "PIL"),
])
def test_bad_images_raise_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        loaded_model("clip_t").score(bad, PROMPTS[:2])


def test_prompt_count_mismatch_raises():
    with pytest.raises(ValueError, match="prompts count mismatch: got 3 prompts for 2 samples"):
        loaded_model("hpsv2").score(images(2), PROMPTS[:3])
    with pytest.raises(ValueError, match="single str"):
        loaded_model("hpsv2").score(images(1), "a cat")


def test_preprocess_matches_torchvision_and_hpsv2_transforms():
    from torchvision import transforms as T
    from hpsv2.src.open_clip.transform import ResizeMaxSize

    x = torch.rand(3, 3, 40, 56)
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    ref = T.Compose([T.Resize(24, interpolation=T.InterpolationMode.BICUBIC, antialias=True), T.CenterCrop(24),
                     T.Normalize(mean, std)])
    assert torch.allclose(preprocess_images(x, 24, mean, std, "center_crop"),
                          torch.stack([ref(im) for im in x]), atol=1e-6)
    ref = T.Compose([ResizeMaxSize(24, fill=0), T.Normalize(mean, std)])
    assert torch.allclose(preprocess_images(x, 24, mean, std, "pad_longest"),
                          torch.stack([ref(im) for im in x]), atol=1e-6)
    with pytest.raises(ValueError, match="unknown preprocessing mode"):
        preprocess_images(x, 24, mode="stretch")


def test_option_values_stay_text_until_the_adapters_parameters_convert_them():
    from otca_patch.config import parse_otca_args
    from otca_patch.rewards.registry import _factory, convert_options

    config, _ = parse_otca_args(["--otca", "--otca_reward_opt", "clip_t.model_name=007,videoalign.fps=12,"
                                 "videoalign.use_norm=false,videoalign.num_frames=8"])
    assert config.otca_reward_opt == {"clip_t": {"model_name": "007"},
                                      "videoalign": {"fps": "12", "use_norm": "false", "num_frames": "8"}}
    assert convert_options("clip_t", _factory("clip_t"), config.otca_reward_opt["clip_t"]) == {"model_name": "007"}
    assert convert_options("videoalign", _factory("videoalign"), config.otca_reward_opt["videoalign"]) == {
        "fps": 12.0, "use_norm": False, "num_frames": 8}
    with pytest.raises(ValueError, match=r"option fps='fast' is not a float"):
        convert_options("videoalign", _factory("videoalign"), {"fps": "fast"})
    with pytest.raises(ValueError, match=r"reward model 'clip_t' has no option 'modle_name'; its options: .*model_name"):
        convert_options("clip_t", _factory("clip_t"), {"modle_name": "x"})


@pytest.mark.parametrize("name, hint", [
    ("hpsv2", "--otca_reward_ckpt hpsv2=PATH"),
    ("clip_t", "--otca_reward_ckpt clip_t=PATH"),
])
def test_missing_checkpoint_error_names_the_training_flag(name, hint, monkeypatch):
    env_var, _ = EXPECTED[name]
    monkeypatch.delenv(env_var, raising=False)
    with pytest.raises(CheckpointError) as err:
        load(name)
    message = str(err.value)
    assert hint in message and f"--reward_ckpt {name}=PATH" in message and env_var in message


def test_a_second_file_names_its_option_flag(monkeypatch):
    from otca_patch.rewards.aesthetic import CLIP_SPEC

    monkeypatch.delenv(CLIP_SPEC.env_var, raising=False)
    message = str(CLIP_SPEC.error(None, "no checkpoint path"))
    assert "--otca_reward_opt aesthetic.clip_checkpoint=PATH" in message and "OTCA_CKPT_AESTHETIC_CLIP" in message
