"""``imagereward``: ImageReward v1.0 (evaluation only; not meant as a training objective).

Architecture from the ImageReward package's own BLIP modules (its ViT and its cross-attention
BERT "med" text encoder) plus the linear head of ``heads.py``; score = (head(text_encoder(prompt,
cross-attending to ViT(image))[CLS]) - 0.16717) / 1.03334, as ``ImageReward.score`` computes it.

Only the package's two model files are imported: its top-level ``__init__`` pulls training and
download code (datasets, the OpenAI ``clip`` package, hub downloads) that scoring does not need.
The published ``ImageReward.load`` also downloads bert-base-uncased's tokenizer at construction;
here it is a local folder.

Files (``checkpoint=`` / ``OTCA_CKPT_IMAGEREWARD``): a folder holding ``ImageReward.pt`` and
``med_config.json`` (huggingface THUDM/ImageReward), or the ``ImageReward.pt`` path with
``med_config.json`` beside it. Tokenizer (``tokenizer=`` / ``OTCA_CKPT_IMAGEREWARD_TOKENIZER``): a
bert-base-uncased tokenizer folder (vocab.txt); by default ``<folder>/bert-base-uncased`` or the
folder itself when it holds vocab.txt. The ViT's width, depth, patch and image size are read from
the state dict (ViT-L/16 at 224 for the published file); heads = width / 64 unless ``vision_heads``.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import List, Optional, Union

import torch
from torch import nn

from .base import ImageBatch, RewardModel
from .checkpoints import CheckpointSpec, PathLike, load_into, load_state_dict, offline_hub, resolve
from .clip_libs import installed
from .heads import LinearHead, head_keys
from .preprocess import CLIP_MEAN, CLIP_STD, preprocess_images

SPEC = CheckpointSpec(
    model="imagereward",
    env_var="OTCA_CKPT_IMAGEREWARD",
    expected="ImageReward.pt + med_config.json from huggingface THUDM/ImageReward (a folder with both, "
             "or the ImageReward.pt path)",
    kind="any",
)
TOKENIZER_SPEC = CheckpointSpec(
    model="imagereward",
    env_var="OTCA_CKPT_IMAGEREWARD_TOKENIZER",
    option="tokenizer",
    expected="the bert-base-uncased tokenizer folder (vocab.txt, tokenizer_config.json; huggingface "
             "google-bert/bert-base-uncased)",
    kind="dir",
)
INSTALL_HINT = ("pip install --no-deps image-reward==1.5 fairscale==0.4.13 (without --no-deps pip would also "
                "downgrade timm to 0.6.13 and pull datasets, neither needed for scoring)")

#: ImageReward v1.0's published reward normalisation (ImageReward.ImageReward.mean / .std).
REWARD_MEAN = 0.16717362830052426
REWARD_STD = 1.0333394966054072
#: BLIP tokenises ImageReward prompts to 35 tokens.
MAX_TEXT_TOKENS = 35


def _load_file_module(package_dir: Path, relative: str, alias: str):
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.spec_from_file_location(alias, package_dir / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[alias]
        raise
    return module


def import_blip_modules():
    """(vit module, med module) from the installed ImageReward package; ImportError says what to install."""
    found = importlib.util.find_spec("ImageReward")
    if found is None or not found.submodule_search_locations:
        raise ImportError(f"reward model 'imagereward' needs the ImageReward package: {INSTALL_HINT}")
    package_dir = Path(list(found.submodule_search_locations)[0])
    try:
        with warnings.catch_warnings():
            # ImageReward's ViT imports timm's pre-1.0 module paths; timm warns, and they still work.
            warnings.simplefilter("ignore", FutureWarning)
            vit = _load_file_module(package_dir, "models/BLIP/vit.py", "otca_patch.rewards._imagereward_vit")
        med = _load_file_module(package_dir, "models/BLIP/med.py", "otca_patch.rewards._imagereward_med")
    except ImportError as exc:
        raise ImportError(f"reward model 'imagereward': importing ImageReward's BLIP modules failed ({exc}); "
                          f"{INSTALL_HINT}") from exc
    return vit, med


class _Blip(nn.Module):
    """The two BLIP parts ImageReward scores with, under the published key names (``blip.*``)."""

    def __init__(self, visual_encoder: nn.Module, text_encoder: nn.Module):
        super().__init__()
        self.visual_encoder = visual_encoder
        self.text_encoder = text_encoder


class _ImageRewardNet(nn.Module):
    def __init__(self, blip: _Blip, mlp: LinearHead):
        super().__init__()
        self.blip = blip
        self.mlp = mlp


def _vision_shape(sd, heads: Optional[int]):
    pos = sd["blip.visual_encoder.pos_embed"]  # [1, 1 + (S/p)^2, D]
    proj = sd["blip.visual_encoder.patch_embed.proj.weight"]  # [D, 3, p, p]
    width, patch = int(proj.shape[0]), int(proj.shape[-1])
    grid = int(round((pos.shape[1] - 1) ** 0.5))
    depth = 1 + max(int(k.split(".")[3]) for k in sd if k.startswith("blip.visual_encoder.blocks."))
    return dict(img_size=grid * patch, patch_size=patch, embed_dim=width, depth=depth,
                num_heads=heads or max(1, width // 64))


class ImageRewardReward(RewardModel):
    checkpoint_slots = (("checkpoint", SPEC, True), ("tokenizer", TOKENIZER_SPEC, False))  # tokenizer: found beside
    """ImageReward (normalised; about -2..2); ``[B]`` float32."""

    name = "imagereward"

    @classmethod
    def missing_packages(cls, paths):
        if installed("ImageReward") and installed("fairscale"):
            return None
        return f"reward model 'imagereward' needs the ImageReward package: {INSTALL_HINT}"

    def __init__(self, checkpoint: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, tokenizer: Optional[PathLike] = None,
                 vision_heads: Optional[int] = None):
        super().__init__(device, dtype)
        vit, med = import_blip_modules()
        from transformers import BertTokenizer

        root = resolve(SPEC, checkpoint)
        weights = root / "ImageReward.pt" if root.is_dir() else root
        med_config = weights.parent / "med_config.json"
        for needed in (weights, med_config):
            if not needed.is_file():
                raise SPEC.error(root, f"{needed.name} not found at {needed}")
        self.checkpoint = weights
        sd = load_state_dict(SPEC, weights)
        try:
            shape = _vision_shape(sd, vision_heads)
            widths = LinearHead.widths_from_state_dict(head_keys(sd, "mlp."))
        except (KeyError, ValueError) as exc:
            raise SPEC.error(weights, f"not an ImageReward state dict (missing {exc})") from None

        try:
            config = med.BertConfig.from_json_file(str(med_config))
        except Exception as exc:
            raise SPEC.error(med_config, f"cannot read med_config.json ({type(exc).__name__})") from exc
        config.encoder_width = shape["embed_dim"]
        net = _ImageRewardNet(
            _Blip(vit.VisionTransformer(**shape), med.BertModel(config=config, add_pooling_layer=False)),
            LinearHead(widths))
        # The published file also holds BLIP's projection / ITM heads that scoring never uses.
        load_into(SPEC, weights, net, sd, allow_unexpected=True)
        self.net = net.to(device=self.device, dtype=dtype).eval()
        self.image_size = shape["img_size"]

        if tokenizer is None and not os.environ.get(TOKENIZER_SPEC.env_var):
            for candidate in (weights.parent / "bert-base-uncased", weights.parent):
                if (candidate / "vocab.txt").is_file():
                    tokenizer = candidate
                    break
        tok_path = resolve(TOKENIZER_SPEC, tokenizer)
        with offline_hub():
            try:
                tok = BertTokenizer.from_pretrained(str(tok_path), local_files_only=True)
            except Exception as exc:
                raise TOKENIZER_SPEC.error(tok_path, f"cannot load the tokenizer ({type(exc).__name__})") from exc
        # Same special tokens as BLIP's init_tokenizer, so token ids match the published model's vocabulary.
        tok.add_special_tokens({"bos_token": "[DEC]"})
        tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
        self.tokenizer = tok

    def _score(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        pixels = preprocess_images(images, self.image_size, CLIP_MEAN, CLIP_STD, "center_crop",
                                   self.device, self.dtype)
        text = self.tokenizer(prompts, padding="max_length", truncation=True, max_length=MAX_TEXT_TOKENS,
                              return_tensors="pt").to(self.device)
        image_embeds = self.net.blip.visual_encoder(pixels)
        image_atts = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=self.device)
        out = self.net.blip.text_encoder(text.input_ids, attention_mask=text.attention_mask,
                                         encoder_hidden_states=image_embeds, encoder_attention_mask=image_atts,
                                         return_dict=True)
        rewards = self.net.mlp(out.last_hidden_state[:, 0, :]).squeeze(-1).float()
        return (rewards - REWARD_MEAN) / REWARD_STD
