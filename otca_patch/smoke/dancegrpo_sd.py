"""Run DanceGRPO's real Stable Diffusion trainer (``fastvideo/train_grpo_sd.py``) on the CPU.

The trainer has no ``train_one_step``: its sampling and training loops live in ``main``, so the smoke
run executes upstream's whole ``main`` through absl's ``app.run`` with upstream's own launch config
(``fastvideo/config_sd/dgx.py:hpsv2``, ``:hps`` in trees older than its rename) and small sizes as
``--config.*`` overrides, in a run folder holding what ``main`` reads from its working directory: a tiny
pipeline in ``./data/stable-diffusion-v1-4``, a tiny HPSv2 checkpoint in ``./hps_ckpt/`` and
``./assets/prompts.txt``. Replaced in the smoke run only: HPSv2's ViT-H-14 and its CUDA load
(``stand_ins.hpsv2.cpu_replacements``). Everything else is upstream's: accelerate (DDP over gloo with 2 ranks, bf16 autocast), DDIM
log-probs, HPSv2 on the saved JPEGs, group advantages, the PPO loop. A probe records each loss and
clipped gradient norm (smoke.json); tests add ``--probe tests/upstream/sd_probe.py:RolloutRecorder``.
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import OtcaConfig
from ..stand_ins.hpsv2 import cpu_replacements
from ..tiny_models.text import IMAGE_PROMPTS
from .flowgrpo import TrainingProbe
from .harness import SmokeSizes, enter_run_folder, finish, load_upstream, report_step

UPSTREAM_FILE = "fastvideo/train_grpo_sd.py"
LAUNCH_CONFIG = "fastvideo/config_sd/dgx.py:hpsv2"  # what finetune_sd_grpo.sh passes
#: the same launch config's name in trees from before DanceGRPO renamed it (its first release, kontext)
OLDER_CONFIG_NAME = "hps"
PROMPTS = IMAGE_PROMPTS + ("a photo of a cat in the snow", "a photo of a dog at night",
                           "a white star on a blue background", "a green circle over the sea")


@dataclass
class Sizes(SmokeSizes):
    """Sizes of one smoke run (upstream's dgx.py:hpsv2 with small numbers; steps are epochs: one rollout
    of 1 prompt x num_generations images per rank, then training)."""

    sampling_steps: int = 4
    num_generations: int = 4
    train_batch_size: int = 1  # upstream asserts sample.batch_size (1 prompt) >= train.batch_size
    gradient_accumulation_steps: int = 4  # one optimizer step per epoch
    timestep_fraction: float = 0.75  # trains int((S-1) * fraction) columns
    num_inner_epochs: int = 1
    seed: int = 42

    @property
    def trained_columns(self) -> int:
        return int((self.sampling_steps - 1) * self.timestep_fraction)


def launch_config(upstream_dir: Path) -> str:
    """``FILE:NAME`` of upstream's HPS launch config in ``upstream_dir``: ``hpsv2``, or ``hps`` in a
    tree whose ``dgx.py`` still calls it that (``get_config`` looks the name up among its functions)."""
    file, _, name = LAUNCH_CONFIG.partition(":")
    try:
        text = (upstream_dir / file).read_text(errors="replace")
    except OSError:
        return LAUNCH_CONFIG
    if f"def {name}(" not in text and f"def {OLDER_CONFIG_NAME}(" in text:
        name = OLDER_CONFIG_NAME
    return f"{file}:{name}"


def config_overrides(sizes: Sizes) -> dict:
    """``--config.KEY=VALUE`` over upstream's launch config."""
    return {"num_epochs": sizes.steps - 1,  # main trains epochs 0..num_epochs
            "seed": sizes.seed, "sample.num_steps": sizes.sampling_steps, "sample.batch_size": 1,
            "num_generations": sizes.num_generations, "train.batch_size": sizes.train_batch_size,
            "train.gradient_accumulation_steps": sizes.gradient_accumulation_steps,
            "train.timestep_fraction": sizes.timestep_fraction, "train.num_inner_epochs": sizes.num_inner_epochs,
            "train.learning_rate": sizes.learning_rate}


def prepare_run_folder(rank: int, reward_root: Path) -> str:
    """What upstream's ``main`` reads from its working directory; returns the tiny HPS architecture."""
    import torch.distributed as dist

    from ..rewards import tiny
    from ..tiny_models.sd import build_tiny_sd

    if rank == 0:
        reward_root.mkdir(parents=True, exist_ok=True)
        Path("hps_ckpt").mkdir(exist_ok=True)
        shutil.copy(tiny.build_hpsv2(reward_root), "hps_ckpt/HPS_v2.1_compressed.pt")
        Path("assets").mkdir(exist_ok=True)
        for prompts in ("assets/prompts.txt", "prompts.txt"):  # the latter: trees older than the hpsv2 rename
            Path(prompts).write_text("\n".join(PROMPTS) + "\n")
        build_tiny_sd(Path("data/stable-diffusion-v1-4"))
    dist.barrier()
    return tiny.register_tiny_hpsv2(reward_root)


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path, probe=None) -> dict:
    missing = [name for name in ("absl", "ml_collections") if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"smoke: DanceGRPO's train_grpo_sd.py imports {', '.join(missing)}, which this environment "
                         f"lacks: pip install -e '.[flowgrpo]' (absl-py, ml_collections)")
    upstream_dir = upstream_dir.resolve()
    rank, world_size = enter_run_folder(out_dir, "images_same")  # upstream writes ./images_same/*.jpg, ./reward.txt
    hps_arch = prepare_run_folder(rank, reward_root)
    module = load_upstream(upstream_dir, UPSTREAM_FILE, config, "dancegrpo_train_grpo_sd")
    training = TrainingProbe(module)  # losses and clipped gradient norms for smoke.json
    chunks = sizes.num_generations // sizes.train_batch_size  # sampling and training chunks per epoch
    recorder = probe(module, calls_per_rollout=chunks) if probe else None

    from absl import app

    # ml_collections reads --config.* overrides from sys.argv itself
    sys.argv = [str(upstream_dir / UPSTREAM_FILE), f"--config={upstream_dir / launch_config(upstream_dir)}",
                *(f"--config.{key}={value}" for key, value in config_overrides(sizes).items())]
    with cpu_replacements(hps_arch):
        try:
            app.run(module.main, argv=sys.argv)
        except SystemExit as stop:  # app.run exits after main returns
            if stop.code not in (0, None):
                raise
    calls = chunks * sizes.trained_columns * sizes.num_inner_epochs
    syncs = chunks // sizes.gradient_accumulation_steps * sizes.num_inner_epochs
    accumulation = sizes.gradient_accumulation_steps * sizes.trained_columns  # accelerate's divisor
    steps = [report_step(rank, epoch + 1, sum(training.losses[epoch * calls:(epoch + 1) * calls]) / accumulation,
                         training.grad_norms[(epoch + 1) * syncs - 1]) for epoch in range(sizes.steps)]
    return finish(out_dir, config, rank, world_size, steps, recorder)
