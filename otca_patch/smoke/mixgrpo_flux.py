"""Run MixGRPO's real FLUX ``train_one_step`` (its sampler, window, rewards aggregation, PPO + KL
loss) on the CPU with tiny models, vanilla or with the layer.

Replaced, and nothing else: the FLUX transformer and VAE are the DanceGRPO FLUX smoke's tiny ones;
HPS-v2.1, CLIP score, ImageReward and PickScore are tiny pixel scorers carrying upstream's class
names (its ``compute_reward`` dispatches on them); UnifiedReward is upstream's own HTTP client,
talking to a stub of its endpoint on 127.0.0.1. Imports the trainer needs but never calls
(``clip``, the ``HPSv2`` source checkout, ``ImageReward``, ``flash_attn``) get stand-ins when absent.
``compute_reward`` reads its scorers' futures in submission order (upstream takes them as they
complete, so its per-model dict order, and the float32 sum of advantages over it, varies from run
to run): vanilla and OTCA runs stay comparable bit for bit.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import http.server
import json
import math
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from .dancegrpo_flux import prompt_loader, tiny_transformer, tiny_vae
from .harness import (call_by_signature, enter_run_folder, finish, fsdp_wrap, load_upstream, optimizer_and_schedule,
                      report_step)
from .sizes import RolloutSizes

UPSTREAM_FILE = "fastvideo/train_grpo_flux.py"
#: MixGRPO's ``--reward_model`` choices and the models its ``main`` builds for each, in its order
REWARD_MODEL_SETS = {
    "hpsv2": ("HPSClipRewardModel",), "clip_score": ("CLIPScoreRewardModel",),
    "image_reward": ("ImageRewardModel",), "pick_score": ("PickScoreRewardModel",),
    "unified_reward": ("UnifiedRewardModel",), "hpsv2_clip_score": ("HPSClipRewardModel", "CLIPScoreRewardModel"),
    "multi_reward": ("HPSClipRewardModel", "ImageRewardModel", "PickScoreRewardModel", "UnifiedRewardModel"),
}
WEIGHT_FLAGS = {"HPSClipRewardModel": "hps_weight", "CLIPScoreRewardModel": "clip_score_weight",
                "ImageRewardModel": "image_reward_weight", "UnifiedRewardModel": "unified_reward_weight",
                "PickScoreRewardModel": "pick_score_weight"}


@dataclass
class Sizes(RolloutSizes):
    """The family's sizes and MixGRPO's options (finetune_flux_grpo_MixGRPO.sh's, made tiny)."""

    training_strategy: str = "part"  # 'part' (sliding SDE window) or 'all' (shuffled steps)
    multi_reward_mix: str = "advantage_aggr"  # or 'reward_aggr'
    reward_model: str = "multi_reward"
    advantage_rerange_strategy: str = "null"  # 'null', 'random', 'balance' (part only)
    window_size: int = 2  # MixGRPO's --group_size: steps in the SDE window
    iters_per_group: int = 1  # steps before the window moves
    trimmed_ratio: float = 0.0
    timestep_fraction: float = 0.6
    frozen_init_timesteps: int = -1
    kl_coeff: float = 0.0
    flow_grpo_sampling: bool = False
    dpm_algorithm_type: str = "null"  # 'dpmsolver++': the Flash variants
    dpm_post_compress_ratio: float = 0.4
    hps_weight: float = 1.0
    clip_score_weight: float = 1.0
    image_reward_weight: float = 1.0
    pick_score_weight: float = 1.0
    unified_reward_weight: float = 1.0
    clip_range: float = 1e-4
    adv_clip_max: float = 5.0
    eta: float = 0.7


def upstream_args(sizes: Sizes, url: str = "") -> argparse.Namespace:
    """What ``train_one_step`` reads, as the MixGRPO launch script sets it (gradient accumulation:
    one optimizer step per prompt)."""
    return argparse.Namespace(
        use_group=True, num_generations=sizes.num_generations, w=sizes.image_size, h=sizes.image_size, t=1,
        sampling_steps=sizes.sampling_steps, shift=sizes.shift, eta=sizes.eta, init_same_noise=True,
        training_strategy=sizes.training_strategy, multi_reward_mix=sizes.multi_reward_mix,
        reward_model=sizes.reward_model, advantage_rerange_strategy=sizes.advantage_rerange_strategy,
        trimmed_ratio=sizes.trimmed_ratio, timestep_fraction=sizes.timestep_fraction,
        frozen_init_timesteps=sizes.frozen_init_timesteps, kl_coeff=sizes.kl_coeff, clip_range=sizes.clip_range,
        adv_clip_max=sizes.adv_clip_max, gradient_accumulation_steps=sizes.num_generations,
        flow_grpo_sampling=sizes.flow_grpo_sampling, drop_last_sample=False,
        dpm_algorithm_type=sizes.dpm_algorithm_type, dpm_apply_strategy="post",
        dpm_post_compress_ratio=sizes.dpm_post_compress_ratio, dpm_solver_order=2, dpm_solver_type="midpoint",
        sample_strategy="progressive", output_dir="outputs", experiment_name="smoke", ignore_last=True,
        train_batch_size=1, unified_reward_url=url,
    )


# ---- stand-ins for imports the FLUX path never calls
def stand_in_imports() -> list:
    """Modules the trainer imports at load time but this run never calls, where they do not import
    (absent, or missing a dependency of their own); each call raises."""
    import importlib

    def unavailable(*_args, **_kwargs):
        raise RuntimeError("an import stand-in of the MixGRPO smoke run was called")

    made = []
    for name, attributes in (("clip", ("tokenize", "load")), ("ImageReward", ("load",)),
                             ("HPSv2.hpsv2.src.open_clip", ("create_model_and_transforms", "get_tokenizer"))):
        try:
            importlib.import_module(name)
            continue
        except Exception:  # noqa: BLE001 - any failure to import: the stand-in instead
            for loaded in [m for m in sys.modules if m == name.split(".")[0] or m.startswith(name.split(".")[0] + ".")]:
                del sys.modules[loaded]
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            module = sys.modules.setdefault(".".join(parts[:depth]), types.ModuleType(".".join(parts[:depth])))
            module.__path__ = []
            if depth > 1:
                setattr(sys.modules[".".join(parts[:depth - 1])], parts[depth - 1], module)
        for attribute in attributes:
            setattr(sys.modules[name], attribute, unavailable)
        made.append(name)
    return made


# ---- tiny scorers named as upstream's reward models
def pixel_score(image, seed: int, centered: bool = False) -> float:
    """A fixed random linear read-out of the image at 8x8 (a different one per reward model);
    ``centered``: of the pixels minus their mean (a score around 0 whatever the brightness)."""
    import numpy as np

    pixels = torch.from_numpy(np.asarray(image.convert("RGB").resize((8, 8)), dtype=np.float32) / 255.0).flatten()
    weights = torch.randn(pixels.numel(), generator=torch.Generator().manual_seed(seed)) / 8.0
    return float((pixels - pixels.mean() if centered else pixels) @ weights)


def scorer_class(name: str, seed: int, prompts_first: bool = False):
    """A scorer class called ``name``: ``model(images, prompts)`` (``(prompts, images)`` for CLIP score)."""
    def __call__(self, first, second):
        images = second if prompts_first else first
        return [pixel_score(image, seed) for image in images]

    return type(name, (), {"__call__": __call__})


class EndpointStub(http.server.BaseHTTPRequestHandler):
    """UnifiedReward's OpenAI-style endpoint: an 'Alignment Score (1-5)' from the posted image."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        import base64
        import io

        from PIL import Image

        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        url = next(part["image_url"]["url"] for part in payload["messages"][0]["content"] if part["type"] == "image_url")
        image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
        score = 3.0 + 2.0 * math.tanh(4.0 * pixel_score(image, 5, centered=True))  # inside (1, 5), never clipped
        body = json.dumps({"choices": [{"message": {"content": f"Alignment Score (1-5): {score:.6f}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def serve_endpoint() -> str:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndpointStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def reward_models(names: tuple, url: str) -> list:
    from fastvideo.models.reward_model.unified_reward import UnifiedRewardModel

    seeds = {name: index + 1 for index, name in enumerate(WEIGHT_FLAGS)}
    return [UnifiedRewardModel(api_url=url, default_question_type="semantic", num_workers=1)
            if name == "UnifiedRewardModel" else
            scorer_class(name, seeds[name], prompts_first=name == "CLIPScoreRewardModel")() for name in names]


def normalised_weights(models: list, sizes: Sizes) -> dict:
    """``reward_weights`` as MixGRPO's ``main`` builds them: per class name, divided by their sum."""
    weights = {type(m).__name__: float(getattr(sizes, WEIGHT_FLAGS[type(m).__name__])) for m in models}
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


def in_submission_order(futures, timeout=None):
    """``as_completed`` for ``compute_reward``, in submission order (see the module docstring)."""
    return list(futures)


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path, probe=None) -> dict:
    if sizes.reward_model not in REWARD_MODEL_SETS:
        raise ValueError(f"--reward_model {sizes.reward_model}: MixGRPO's choices are {', '.join(REWARD_MODEL_SETS)}")
    stand_in_imports()
    rank, world_size = enter_run_folder(out_dir, "outputs")
    module = load_upstream(upstream_dir.resolve(), UPSTREAM_FILE, config, "mixgrpo_train_grpo_flux")
    import fastvideo.models.reward_model.utils as reward_utils
    from fastvideo.utils.grpo_states import GRPOTrainingStates

    reward_utils.concurrent = types.SimpleNamespace(futures=types.SimpleNamespace(
        ThreadPoolExecutor=concurrent.futures.ThreadPoolExecutor, as_completed=in_submission_order))
    recorder = probe(module, log_prob_index=2) if probe else None  # all_log_probs: result[2]

    url = serve_endpoint()
    models = reward_models(REWARD_MODEL_SETS[sizes.reward_model], url)
    weights = normalised_weights(models, sizes)
    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = fsdp_wrap(tiny_transformer())
    transformer.train()
    vae = tiny_vae().eval()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    args = upstream_args(sizes, url)
    window = GRPOTrainingStates(iters_per_group=sizes.iters_per_group, group_size=sizes.window_size,
                                max_timesteps=sizes.sampling_steps - 2, sample_strategy="progressive",
                                prog_overlap=False, roll_back=True)
    loader = prompt_loader(rank, sizes.seed)
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds

    steps = []
    for step in range(1, sizes.steps + 1):
        if sizes.training_strategy == "part":
            timesteps_train = window.get_current_timesteps()
            window.update_iteration()
        else:
            timesteps_train = list(range(sizes.sampling_steps))
        result = call_by_signature(module.train_one_step, dict(
            args=args, device=torch.device("cpu"), transformer=transformer, vae=vae, reward_models=models,
            optimizer=optimizer, lr_scheduler=lr_scheduler, loader=loader, noise_scheduler=None, max_grad_norm=1.0,
            timesteps_train=timesteps_train, global_step=step - 1, reward_weights=weights))
        steps.append(report_step(rank, step, result[0], result[1], window=list(timesteps_train),
                                 rewards=result[5]))
    return finish(out_dir, config, rank, world_size, steps, recorder, reward_weights=weights,
                  training_strategy=sizes.training_strategy, multi_reward_mix=sizes.multi_reward_mix)
