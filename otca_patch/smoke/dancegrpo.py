"""The DanceGRPO family's smoke: upstream's real ``train_one_step`` of the spec's ``file`` on the CPU,
called with its own parameter names, on tiny models, vanilla or rewritten by its spec exactly as a
launched worker's file is (``harness.load_upstream``). Everything that decides the numbers (weights,
prompts, noise) is seeded after the layer is installed: vanilla and OTCA runs start alike.

A trainer's spec says what it adds, in its ``[target.smoke]`` table (``harness = "dancegrpo"``): the
tiny ``model`` (``MODELS``: the transformer as upstream's ``main`` wraps it, the VAE, what upstream's
data loader hands ``train_one_step``, the reward it scores with), its ``sizes`` and ``overrides`` (the
upstream arguments ``train_one_step`` reads, over ``BASE_ARGS``; a value ``"{size}"`` is that size).
A trainer that follows its family (a fork's copy of the FLUX trainer) costs its spec alone.

Stood in, at the smallest boundaries (``stand_ins``): flash-attention inside upstream's HunyuanVideo
transformer and VideoAlign's Qwen2-VL scorer (``video_align``); FSDP's CUDA device (the CPU here, or
this rank's GPU). HPSv2 is upstream's, through hpsv2's open_clip, on a tiny checkpoint.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import torch

from ..config import OtcaConfig
from ..hooks.spec import Smoke, load_specs
from ..stand_ins.cpu import cpu_as_current_device, smoke_device
from ..stand_ins.hpsv2 import upstream_hps_reward
from ..stand_ins.video_align import StubVideoAlign
from ..tiny_models import flux, hunyuan, qwenimage, wan
from ..tiny_models.text import IMAGE_PROMPTS, VIDEO_PROMPTS
from .harness import (RolloutSizes, call_by_signature, cast_inputs_to_weights, enter_run_folder, filled, finish,
                      fsdp_wrap, inputs_on_device, load_upstream, on_device, optimizer_and_schedule, report_step,
                      sizes_type)

#: the upstream arguments every trainer of the family reads, as its launch scripts set them
BASE_ARGS = {"use_group": True, "num_generations": "{num_generations}", "w": "{image_size}", "h": "{image_size}",
             "t": 1, "sampling_steps": "{sampling_steps}", "shift": "{shift}", "eta": "{eta}",
             "timestep_fraction": "{timestep_fraction}", "gradient_accumulation_steps": "{num_generations}"}


# ---- what upstream's data loaders hand train_one_step, one dict per step (on the CPU: ``train`` moves them)
def flux_batches(rank: int, seed: int):
    """FLUX's loader: (prompt_embeds [1, L, 32], pooled [1, 32], text_ids [1, 3], captions). Captions come
    as a list: upstream's own collate hands a tuple, which its train_one_step rejects on current torch."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    table = {p: (torch.randn(1, 8, 32, generator=generator), torch.randn(1, 32, generator=generator))
             for p in IMAGE_PROMPTS}
    for position in itertools.count(rank):
        caption = IMAGE_PROMPTS[position % len(IMAGE_PROMPTS)]
        yield table[caption][0].clone(), table[caption][1].clone(), torch.zeros(1, 3), [caption]


def flux_prompts(rank: int, sizes) -> Iterator[dict]:
    return itertools.repeat({"loader": flux_batches(rank, sizes.seed)})


def hunyuan_prompts(rank: int, sizes) -> Iterator[dict]:
    """HunyuanVideo's loader: (encoder_hidden_states [1, 1 + L, 32] -- the first token carries the pooled
    projection --, encoder_attention_mask [1, L] with padding, captions as a list)."""
    generator = torch.Generator().manual_seed(10_000 + sizes.seed)
    table = {p: torch.randn(1, 9, 32, generator=generator) for p in VIDEO_PROMPTS}
    mask = (torch.arange(8) < 6).long()[None]

    def batches():
        for position in itertools.count(rank):
            caption = VIDEO_PROMPTS[position % len(VIDEO_PROMPTS)]
            yield table[caption].clone(), mask.clone(), [caption]
    return itertools.repeat({"loader": batches()})


def wan_prompts(rank: int, sizes) -> Iterator[dict]:
    """Wan's loop: prompt embeds [1, L, 32], negative embeds [1, L, 32] and the caption as a list."""
    generator = torch.Generator().manual_seed(10_000 + sizes.seed)
    table = {p: torch.randn(1, 8, 32, generator=generator) for p in VIDEO_PROMPTS}
    negative = torch.randn(1, 8, 32, generator=generator)
    for step in itertools.count(1):
        caption = VIDEO_PROMPTS[(rank + step) % len(VIDEO_PROMPTS)]
        yield {"encoder_hidden_states": table[caption].clone(), "negative_prompt_embeds": negative.clone(),
               "caption": [caption]}


def qwenimage_prompts(rank: int, sizes, edit: bool = False) -> Iterator[dict]:
    """Qwen-Image's loader: embeddings ``[1, L, 32]`` padded after ``original_length`` tokens (not the same
    length every step), the mask ``[1, L]``, the caption list, ``original_length [1]``; the edit dataset
    adds its conditioning image's VAE latents ``[1, 16, 1, h, w]`` and ``calculated_height`` / ``_width``."""
    generator = torch.Generator().manual_seed(10_000 + sizes.seed)
    table = {p: torch.randn(1, 8, 32, generator=generator) for p in IMAGE_PROMPTS}
    side = sizes.image_size // 8
    for step in itertools.count(1):
        caption = IMAGE_PROMPTS[(rank + step - 1) % len(IMAGE_PROMPTS)]
        length = 6 - (step % 2)
        mask = (torch.arange(8) < length).long()[None]
        batch = {"prompt_embeds": table[caption] * mask[..., None], "prompt_attention_masks": mask,
                 "caption": [caption], "original_length": torch.tensor([length])}
        if edit:
            image = torch.Generator().manual_seed(20_000 + sizes.seed + IMAGE_PROMPTS.index(caption))
            batch.update(image_latents=torch.randn(1, 16, 1, side, side, generator=image),
                         calculated_height=torch.tensor([sizes.image_size]),
                         calculated_width=torch.tensor([sizes.image_size]))
        yield batch


# ---- the transformer as upstream's main wraps it
def fsdp_model(build: Callable, cast: bool = False) -> Callable:
    """``build()`` on the smoke device (its inputs cast to its weights where upstream's autocast would),
    under upstream's own FSDP wrapping (``get_dit_fsdp_kwargs``)."""
    def transformer(sizes):
        model = on_device(build())
        if cast:
            cast_inputs_to_weights(model)
        return fsdp_wrap(model)
    return transformer


def unwrapped(build: Callable) -> Callable:
    """Wan: upstream wraps its transformer in neither FSDP nor DDP (each rank holds a replica)."""
    def transformer(sizes):
        model = on_device(build())
        cast_inputs_to_weights(model)
        return model
    return transformer


def lora_transformer(sizes) -> torch.nn.Module:
    """The LoRA trainer's main: frozen FLUX + a peft adapter on ``to_k/to_q/to_v/to_out.0``, wrapped in
    FSDP with peft's policy from ``get_dit_fsdp_kwargs(..., use_lora=True)``."""
    from fastvideo.utils.fsdp_util import get_dit_fsdp_kwargs
    from peft import LoraConfig
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    transformer = flux.flux_transformer()
    transformer.requires_grad_(False)
    transformer.add_adapter(LoraConfig(r=sizes.lora_rank, lora_alpha=sizes.lora_alpha, init_lora_weights=True,
                                       target_modules=["to_k", "to_q", "to_v", "to_out.0"]))
    with cpu_as_current_device():
        fsdp_kwargs, no_split_modules = get_dit_fsdp_kwargs(transformer, "full", True, False, "fp32")
        transformer._no_split_modules = [module.__name__ for module in no_split_modules]
        fsdp_kwargs["auto_wrap_policy"] = fsdp_kwargs["auto_wrap_policy"](transformer)
        # FSDP's sync_module_states broadcasts from GPU memory only; every rank builds the same seeded weights
        fsdp_kwargs["sync_module_states"] = False
        return FSDP(transformer, **fsdp_kwargs)


def qwenimage_fsdp(sizes) -> torch.nn.Module:
    """``fsdp_util_qwenimage.fsdp_wrapper`` with ``main``'s ``FSDPConfig`` (one unit per block, bf16 mixed
    precision), on the smoke device: upstream's ``device_id=rank % torch.cuda.device_count()`` divides by
    zero without a GPU."""
    from diffusers.models.transformers.transformer_qwenimage import QwenImageTransformerBlock
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    bf16 = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16)
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={QwenImageTransformerBlock})
    return FSDP(qwenimage.qwenimage_transformer(), auto_wrap_policy=policy, mixed_precision=bf16,
                sharding_strategy=ShardingStrategy.FULL_SHARD, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                cpu_offload=CPUOffload(offload_params=False), use_orig_params=True, device_id=smoke_device())


def skyreels_extras(rank: int, sizes, reward_root: Path) -> dict:
    """SkyReels draws each first frame with FLUX (``./data/flux``: a tiny folder) and guides against the
    empty prompt (``./data/empty``: ``[1 + L, 32]`` states, ``[L]`` mask)."""
    from diffusers import FluxPipeline

    folder = flux.build_tiny_flux(reward_root / f"flux_rank{rank}")
    pipe_flux = on_device(FluxPipeline.from_pretrained(str(folder), torch_dtype=torch.float32))
    pipe_flux.set_progress_bar_config(disable=True)
    states = torch.randn(9, 32, generator=torch.Generator().manual_seed(20_000 + sizes.seed))
    mask = (torch.arange(8) < 2).long()
    return {"pipe_flux": pipe_flux, "empty_cond_hidden_states": states.to(smoke_device()),
            "empty_cond_attention_mask": mask.to(smoke_device())}


@dataclass(frozen=True)
class TinyModel:
    """What a trainer of the family trains on the CPU: ``transformer(sizes)`` (built and wrapped),
    ``vae()``, ``inputs(rank, sizes)`` (one dict per step), ``reward`` (``hps``: upstream's HPSv2 on a
    tiny checkpoint; ``videoalign``: the stand-in), ``outputs`` (the folder upstream writes into),
    ``log_prob_index`` (where ``sample_reference_model``'s result holds ``all_log_probs``, for the test
    probe), ``replicas`` (unwrapped: each rank's weight checksum per step) and ``extras``."""

    transformer: Callable
    vae: Callable
    inputs: Callable
    reward: str = "hps"
    outputs: str = "images"
    log_prob_index: int = 2
    replicas: bool = False
    extras: Callable = lambda rank, sizes, reward_root: {}


MODELS = {
    "flux": TinyModel(fsdp_model(flux.flux_transformer), flux.flux_vae, flux_prompts),
    "flux_lora": TinyModel(lora_transformer, flux.flux_vae, flux_prompts),
    "qwenimage": TinyModel(qwenimage_fsdp, qwenimage.qwenimage_vae, qwenimage_prompts),
    "qwenimage_edit": TinyModel(qwenimage_fsdp, qwenimage.qwenimage_vae,
                                functools.partial(qwenimage_prompts, edit=True)),
    "hunyuan": TinyModel(fsdp_model(hunyuan.hunyuan_transformer, cast=True), hunyuan.hunyuan_vae, hunyuan_prompts,
                         reward="videoalign", outputs="videos", log_prob_index=5),
    "skyreels_i2v": TinyModel(fsdp_model(functools.partial(hunyuan.hunyuan_transformer, in_channels=32), cast=True),
                              hunyuan.hunyuan_vae, hunyuan_prompts, reward="videoalign", outputs="videos",
                              log_prob_index=4, extras=skyreels_extras),
    "wan": TinyModel(unwrapped(wan.wan_transformer), wan.wan_vae, wan_prompts, outputs="videos", replicas=True),
}


def reward_inputs(model: TinyModel, reward_root: Path) -> dict:
    """The reward arguments of ``train_one_step``: upstream's HPSv2 on a tiny checkpoint, or VideoAlign's stand-in."""
    if model.reward == "videoalign":
        return {"inferencer": StubVideoAlign()}
    from ..rewards import tiny

    reward_model, tokenizer, preprocess_val = upstream_hps_reward(tiny.build_hpsv2(reward_root), tiny.TINY_HPS_ARCH)
    return {"reward_model": on_device(reward_model), "tokenizer": tokenizer, "preprocess_val": preprocess_val}


def weights_checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


@dataclass(frozen=True)
class DanceTrainer:
    """One trainer's smoke: ``smoke`` (its spec's ``[target.smoke]``) and ``sizes`` (its size flags)."""

    smoke: Smoke
    sizes: type

    @property
    def model(self) -> TinyModel:
        return MODELS[self.smoke.model]

    def upstream_args(self, sizes) -> argparse.Namespace:
        """What ``train_one_step`` reads: the family's arguments, then the trainer's, sizes filled in."""
        return argparse.Namespace(**filled({**BASE_ARGS, **self.smoke.overrides}, sizes))

    def run(self, upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes, reward_root: Path,
            probe=None) -> dict:
        upstream_dir = upstream_dir.resolve()  # before the chdir below
        rank, world_size = enter_run_folder(out_dir, self.model.outputs)  # upstream writes there and ./reward.txt
        reward_root.mkdir(parents=True, exist_ok=True)
        module = load_upstream(upstream_dir, self.smoke.file, config, f"dancegrpo_{Path(self.smoke.file).stem}")
        recorder = probe(module, log_prob_index=self.model.log_prob_index) if probe else None
        torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
        transformer = self.model.transformer(sizes)
        vae = on_device(self.model.vae().eval())
        available = {"vae": vae, **self.model.extras(rank, sizes, reward_root)}
        steps = train(module, transformer, sizes, rank, out_dir, self.upstream_args(sizes),
                      {**available, **reward_inputs(self.model, reward_root)}, self.model.inputs(rank, sizes),
                      self.model.replicas)
        extra = {"sync_grads": config.otca_sync_grads} if self.model.replicas else {}
        return finish(out_dir, config, rank, world_size, steps, recorder, **extra)


def train(module, transformer, sizes, rank: int, out_dir: Path, args, available: dict, inputs: Iterator[dict],
          replicas: bool) -> list:
    """Upstream's ``train_one_step`` for ``sizes.steps`` steps on ``transformer`` (trained in place);
    ``replicas``: each rank's weight checksums per step, written to ``weights_rank<r>.json``. Returns the
    smoke.json step entries."""
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    common = {"args": args, "device": smoke_device(), "transformer": transformer, "optimizer": optimizer,
              "lr_scheduler": lr_scheduler, "noise_scheduler": None, "max_grad_norm": 1.0, "ema_handler": None,
              **available}
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds
    steps = []
    for step, step_inputs in zip(range(1, sizes.steps + 1), inputs):
        step_inputs = inputs_on_device(step_inputs)
        loss, grad_norm = call_by_signature(module.train_one_step, {**common, **step_inputs, "step": step})
        checksum = {"weights": weights_checksum(transformer)} if replicas else {}
        steps.append(report_step(rank, step, loss, grad_norm, **checksum))
    if replicas:
        (out_dir / f"weights_rank{rank}.json").write_text(json.dumps([s["weights"] for s in steps]))
    return steps


def trainer(name: str, smoke: Smoke) -> DanceTrainer:
    """Target ``name``'s trainer from its spec's ``[target.smoke]`` table (a model or size that does not exist: one line)."""
    where = f"target {name}: [target.smoke]"
    if smoke.model not in MODELS:
        raise ValueError(f"{where} model must be one of {', '.join(MODELS)}, got {smoke.model!r}")
    return DanceTrainer(smoke, sizes_type(where, RolloutSizes, smoke.sizes, {**BASE_ARGS, **smoke.overrides}))


def target_smoke(name: str, smoke: Smoke) -> SimpleNamespace:
    """What the smoke command runs for target ``name``: its ``Sizes`` and ``run``."""
    dance = trainer(name, smoke)
    return SimpleNamespace(Sizes=dance.sizes, run=dance.run)


def trainer_named(name: str) -> DanceTrainer:
    """The trainer of the shipped spec ``name``."""
    return trainer(name, next(spec.smoke for spec in load_specs() if spec.name == name))
