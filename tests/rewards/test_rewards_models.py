"""Each image reward adapter on its tiny checkpoint: contract, determinism, agreement with the
reference computation of the project it comes from."""
from __future__ import annotations

import pytest
import torch

from rewards_fixtures import (IMAGE_REWARDS, NEEDS_IMAGEREWARD, PROMPTS, images, loaded_model, tiny_checkpoints,
                              to_pil)
from otca_patch.rewards import tiny


@pytest.mark.parametrize("name", IMAGE_REWARDS)
def test_score_shape_dtype_no_grad_and_determinism(name):
    model = loaded_model(name)
    x = images(4, seed=0)
    first = model.score(x, PROMPTS)
    assert first.shape == (4,)
    assert first.dtype == torch.float32
    assert not first.requires_grad
    assert torch.isfinite(first).all()
    assert torch.equal(first, model.score(x, PROMPTS))
    assert model.score_all(x, PROMPTS).shape == (4, 1)


@pytest.mark.parametrize("name", IMAGE_REWARDS)
def test_different_images_give_different_scores(name):
    model = loaded_model(name)
    a = model.score(images(4, seed=0), PROMPTS)
    b = model.score(images(4, seed=1), PROMPTS)
    assert not torch.allclose(a, b, rtol=0, atol=1e-6)
    assert len(set(a.tolist())) > 1  # the samples of one batch are not all scored alike


@pytest.mark.parametrize("name", ["clip_t", "hpsv2", "pickscore", pytest.param("imagereward", marks=NEEDS_IMAGEREWARD)])
def test_different_prompts_give_different_scores(name):
    model = loaded_model(name)
    x = images(4, seed=0)
    a = model.score(x, PROMPTS)
    b = model.score(x, list(reversed(PROMPTS)))
    assert not torch.allclose(a, b, rtol=0, atol=1e-6)


def test_aesthetic_ignores_prompts():
    model = loaded_model("aesthetic")
    x = images(4, seed=0)
    assert torch.allclose(model.score(x, PROMPTS), model.score(x, ["x"] * 4))


@pytest.mark.parametrize("name", IMAGE_REWARDS)
def test_pil_list_equals_tensor(name):
    model = loaded_model(name)
    x = images(3, seed=2)
    assert torch.allclose(model.score(to_pil(x), PROMPTS[:3]), model.score(x, PROMPTS[:3]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", IMAGE_REWARDS)
def test_batched_equals_one_at_a_time_and_other_sizes(name):
    model = loaded_model(name)
    x = images(3, seed=3, size=48)  # not the model's size: exercises the batched resize
    batched = model.score(x, PROMPTS[:3])
    single = torch.cat([model.score(x[i:i + 1], PROMPTS[i:i + 1]) for i in range(3)])
    assert torch.allclose(batched, single, rtol=1e-4, atol=1e-5)


def test_clip_t_equals_cosine_of_open_clip_embeddings():
    import open_clip

    checkpoints, _ = tiny_checkpoints()
    model = loaded_model("clip_t")
    ref, _, preprocess = open_clip.create_model_and_transforms(
        tiny.TINY_CLIP_ARCH, pretrained=str(checkpoints["clip_t"]), force_quick_gelu=True)
    ref.eval()
    tokenizer = open_clip.get_tokenizer(tiny.TINY_CLIP_ARCH)
    pil = to_pil(images(4, seed=4))
    with torch.no_grad():
        img = ref.encode_image(torch.stack([preprocess(p) for p in pil]))
        txt = ref.encode_text(tokenizer(PROMPTS))
    expected = torch.nn.functional.cosine_similarity(img, txt, dim=-1)
    assert torch.allclose(model.score(pil, PROMPTS), expected, rtol=0, atol=1e-5)


def test_hpsv2_matches_the_hpsv2_reference_pipeline():
    """DanceGRPO's FLUX trainer / hpsv2.img_score: light_augmentation preprocess_val per image, diag of
    image_features @ text_features.T -- here on non-square images that need resize and padding."""
    from hpsv2.src.open_clip import create_model_and_transforms, get_tokenizer

    checkpoints, _ = tiny_checkpoints()
    ref, _, preprocess_val = create_model_and_transforms(
        tiny.TINY_HPS_ARCH, None, precision="fp32", device="cpu", light_augmentation=True, output_dict=True)
    ref.load_state_dict(torch.load(checkpoints["hpsv2"], weights_only=True)["state_dict"])
    ref.eval()
    tokenizer = get_tokenizer(tiny.TINY_HPS_ARCH)
    x = torch.randint(0, 256, (3, 3, 40, 56), generator=torch.Generator().manual_seed(5)).float() / 255
    pil = to_pil(x)
    expected = []
    with torch.no_grad():
        for p, prompt in zip(pil, PROMPTS):
            out = ref(preprocess_val(p).unsqueeze(0), tokenizer([prompt]))
            expected.append(torch.diagonal(out["image_features"] @ out["text_features"].T))
    expected = torch.cat(expected)
    model = loaded_model("hpsv2")
    assert torch.allclose(model.score(pil, PROMPTS[:3]), expected, rtol=0, atol=1e-5)
    assert torch.allclose(model.score(x, PROMPTS[:3]), expected, rtol=0, atol=1e-5)


def test_pickscore_matches_the_pickscore_formula():
    from transformers import CLIPModel, CLIPProcessor

    checkpoints, options = tiny_checkpoints()
    processor = CLIPProcessor.from_pretrained(str(options["pickscore"]["processor"]), local_files_only=True)
    ref = CLIPModel.from_pretrained(str(checkpoints["pickscore"]), local_files_only=True).eval()
    pil = to_pil(images(4, seed=6))
    with torch.no_grad():
        image_inputs = processor(images=pil, return_tensors="pt")
        text_inputs = processor(text=PROMPTS, padding=True, truncation=True, max_length=77, return_tensors="pt")
        img = ref.get_image_features(**image_inputs)
        txt = ref.get_text_features(**text_inputs)
        img = img / img.norm(dim=-1, keepdim=True)
        txt = txt / txt.norm(dim=-1, keepdim=True)
        expected = ref.logit_scale.exp() * (txt * img).sum(-1)
    assert torch.allclose(loaded_model("pickscore").score(pil, PROMPTS), expected, rtol=0, atol=1e-4)


def test_aesthetic_is_the_head_over_normalised_clip_embeddings():
    model = loaded_model("aesthetic")
    clip_t = loaded_model("clip_t")  # same tiny CLIP backbone file
    x = images(2, seed=7)
    with torch.no_grad():
        emb, _ = clip_t.embed(x, PROMPTS[:2])
        expected = model.head(emb).squeeze(-1)
    assert torch.allclose(model.score(x, PROMPTS[:2]), expected, rtol=0, atol=1e-6)


@NEEDS_IMAGEREWARD
def test_imagereward_reads_the_vision_shape_from_the_state_dict():
    model = loaded_model("imagereward")
    assert model.image_size == tiny.TINY_IMAGE_SIZE
    assert model.net.blip.visual_encoder.pos_embed.shape == (1, 1 + (32 // 16) ** 2, 64)
    assert model.tokenizer.convert_tokens_to_ids("[ENC]") == len(model.tokenizer) - 1


def test_dtype_is_the_callers_and_scores_stay_float32():
    from otca_patch.rewards import load

    checkpoints, options = tiny_checkpoints()
    model = load("clip_t", checkpoint=checkpoints["clip_t"], dtype=torch.bfloat16, **options["clip_t"])
    assert next(model.model.parameters()).dtype == torch.bfloat16
    out = model.score(images(2), PROMPTS[:2])
    assert out.dtype == torch.float32
    assert torch.allclose(out, loaded_model("clip_t").score(images(2), PROMPTS[:2]), atol=0.05)


def test_imagereward_import_error_says_what_to_install(monkeypatch):
    import importlib.util

    from otca_patch.rewards import imagereward

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ImageReward" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install --no-deps image-reward==1\.5 fairscale==0\.4\.13"):
        imagereward.import_blip_modules()
