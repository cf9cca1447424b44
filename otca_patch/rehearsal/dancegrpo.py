"""The DanceGRPO family's rehearsals: ``fastvideo/train_grpo_flux.py`` (dancegrpo-flux) and
``fastvideo/train_grpo_hunyuan.py`` (dancegrpo-hunyuan), each run by upstream's own
``scripts/finetune/`` script, set-up lines included (``verbatim``), in a per-run copy of the checkout
(upstream writes ``./images``, ``./reward.txt`` and its outputs into its working directory)."""
from __future__ import annotations

import json
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import Callable

from . import upstreams
from .launch_script import launcher_line, option_value, set_options, split_launcher
from .plan import Plan
from .verbatim import HPSV2_URL, SERVED_REPLACEMENTS, Served, script_command, served_hpsv2
from .standins import (HUNYUAN, IMPORT_STUBS_VARIABLE, PINNED_STRUCTURE, REPLACEMENTS_CPU, REPLACEMENTS_HUNYUAN,
                       REPLACEMENTS_HUNYUAN_CPU, TINY_HPS_CONFIG_VARIABLE)

TARGETS = ("dancegrpo-flux", "dancegrpo-hunyuan")
FLUX_SCRIPT = "scripts/finetune/finetune_flux_grpo.sh"
HUNYUAN_SCRIPT = "scripts/finetune/finetune_hunyuan_grpo.sh"
#: the exports of upstream's scripts the rehearsal changes: wandb online needs the network, and the
#: wandb here ignores the scripts' WANDB_DISABLED=true
EXPORTS = {"WANDB_MODE": "disabled"}
EXPORTS_REPLACED = ("the script's `export WANDB_MODE=online` -> disabled (no network; the wandb here ignores its "
                    "WANDB_DISABLED=true)")
RANKS = 2  # on the CPU; on GPUs one process per GPU, at most 2 (NCCL takes one GPU per rank)
STARTUP = Path(__file__).resolve().parent / "startup"
#: upstream's numbers the CPU cannot afford -> the rehearsal's (each is stated as a replacement); its
#: 12 generations and 16 sampling steps are kept: 3 optimizer steps per training step, and DataLoader
#: workers that live through more than 10 s of training
FLUX_SMALL = {"--max_train_steps": "2", "--checkpointing_steps": "2", "--h": "32", "--w": "32"}
#: Hunyuan: its 24 generations, best-of-8, 4 accumulation steps and 16 sampling steps are kept (2 optimizer
#: steps per training step); 53 frames at 480x480 -> 5 frames at 32x32 (2 latent frames of 4x4)
HUNYUAN_SMALL = {"--max_train_steps": "2", "--checkpointing_steps": "2", "--h": "32", "--w": "32", "--t": "5"}
#: the prompts the tiny text encoders embed (the tiny T5 knows only their words)
from ..tiny_models.text import IMAGE_PROMPTS  # noqa: E402

FLOAT = r"(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
#: what upstream's train_one_step prints on rank 0, one line per sample
FLUX_PRINTS = re.compile(rf"^(reward|advantage|final loss) {FLOAT}$")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ranks_on(device: str) -> int:
    if device == "cpu":
        return RANKS
    import torch

    return max(1, min(RANKS, torch.cuda.device_count()))


def torchrun_command(upstream_script: Path, small: dict[str, str], ranks: int) -> tuple[list[str], list[str]]:
    """(upstream's torchrun line with ``small``'s values, less its node options, the replacements it makes)."""
    launcher, script, arguments = split_launcher(launcher_line(upstream_script))
    replaced = [f"{' '.join(launcher)} (several 8-GPU nodes) -> one node, {ranks} processes, loopback "
                f"rendezvous on a free port"]
    arguments = set_options(arguments, small)
    replaced.append("upstream's sizes -> " + ", ".join(f"{k} {v}" for k, v in small.items()))
    return [script, *arguments], replaced


def launch(words: list[str], ranks: int, by_name: bool = False) -> list[str]:
    """``torchrun`` (this interpreter's, else the module it runs) on one node with ``ranks`` processes;
    ``by_name``: ``torchrun`` (or ``python -m ...``) as a script names it, for the run's PATH to find."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if by_name:
        launcher = ["torchrun"] if torchrun else ["python", "-m", "torch.distributed.run"]
    else:
        launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--nnodes=1", f"--nproc_per_node={ranks}", "--node_rank=0", "--master_addr=127.0.0.1",
            f"--master_port={free_port()}", *words]


def copy_checkout(checkout: Path, run: Path, links: dict[str, Path] | None = None, folders: tuple[str, ...] = (),
                  keep: tuple[str, ...] = ("fastvideo",)) -> Path:
    """``run/`` as a working copy of the checkout's code (``keep``), where upstream writes its files, with
    ``links`` (relative path -> what it points to: the tiny models and data in upstream's layout) and the
    empty ``folders`` upstream's launch script makes."""
    run.mkdir(parents=True, exist_ok=True)
    for name in keep:
        shutil.copytree(checkout / name, run / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for relative, target in (links or {}).items():
        (run / relative).parent.mkdir(parents=True, exist_ok=True)
        (run / relative).symlink_to(target)
    for folder in folders:
        (run / folder).mkdir(parents=True)
    return run


def numbers_printed(path: Path, pattern: re.Pattern) -> list[float]:
    if not path.is_file():
        return []
    found = (pattern.match(line.strip()) for line in path.read_text(errors="replace").splitlines())
    return [float(m.group(2)) for m in found if m]


def environment(device: str, extra: dict[str, str]) -> dict[str, str]:
    """PYTHONPATH: the stand-ins' start-up hook, then the working copy (upstream's ``pip install -e .``),
    then what it held; wandb disabled (upstream's script sets WANDB_DISABLED=true)."""
    import os

    path = [str(STARTUP), ".", *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path),
            "OTCA_REHEARSAL_DEVICE": device, "WANDB_DISABLED": "true", "WANDB_MODE": "disabled",
            "OMP_NUM_THREADS": "1", **extra}


# ---- tiny models and data in DanceGRPO's layout

def tiny_hunyuan(checkout: Path, folder: Path) -> Path:
    """``data/HunyuanVideo`` as ``load_transformer`` and ``load_vae`` read it (``transformer/`` and
    ``vae/`` in diffusers' layout): the smoke's tiny upstream HunyuanVideo transformer and tiny VAE."""
    import torch

    from ..tiny_models.hunyuan import hunyuan_transformer, hunyuan_vae
    from ..stand_ins.cpu import stub_flash_attn

    stub_flash_attn()  # upstream's modeling module imports flash_attn at import
    sys.path.insert(0, str(checkout))
    try:
        torch.manual_seed(0)
        hunyuan_transformer().save_pretrained(str(folder / "transformer"))
        hunyuan_vae().save_pretrained(str(folder / "vae"))
    finally:
        sys.path.remove(str(checkout))
    return folder


def hunyuan_embeddings(out: Path, prompts, seed: int = 0) -> Path:
    """``data/rl_embeddings`` as ``preprocess_hunyuan_embeddings.py`` writes it (per prompt i:
    ``prompt_embed/i.pt`` [1 + L, 32] (the first token carries the pooled projection) and
    ``prompt_attention_mask/i.pt`` [L], padded, and ``videos2caption.json``)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    for name in ("prompt_embed", "prompt_attention_mask"):
        (out / name).mkdir(parents=True, exist_ok=True)
    mask = torch.ones(8, dtype=torch.long)
    mask[6:] = 0
    items = []
    for index, caption in enumerate(prompts):
        name = f"{index}.pt"
        torch.save(torch.randn(9, 32, generator=generator), out / "prompt_embed" / name)
        torch.save(mask.clone(), out / "prompt_attention_mask" / name)
        items.append({"prompt_embed_path": name, "prompt_attention_mask": name, "caption": caption})
    (out / "videos2caption.json").write_text(json.dumps(items, indent=4))
    return out / "videos2caption.json"


def tiny_hps(folder: Path) -> tuple[Path, list[str]]:
    """``hps_ckpt/open_clip_pytorch_model.bin`` (the CLIP upstream's main builds first) and
    ``hps_ckpt/HPS_v2.1_compressed.pt`` (``{'state_dict'}``, loaded over it), of the tiny hpsv2
    architecture, whose config ``ViT-H-14.json`` stands for the ViT-H-14 upstream names."""
    import torch

    from ..rewards import tiny

    checkpoints = folder / "hps_ckpt"
    checkpoints.mkdir(parents=True, exist_ok=True)
    hps = tiny.build_hpsv2(folder / "built")
    shutil.copyfile(hps, checkpoints / "HPS_v2.1_compressed.pt")
    state = torch.load(hps, map_location="cpu", weights_only=True)["state_dict"]
    torch.save(state, checkpoints / "open_clip_pytorch_model.bin")
    config = folder / "ViT-H-14.json"
    config.write_text(json.dumps(tiny._TINY_CLIP_CFG))
    return config, ["HPS v2.1 (ViT-H-14, from the HPSv2 checkout) -> a 1-layer 32-wide hpsv2 CLIP written as "
                    "hps_ckpt/open_clip_pytorch_model.bin and hps_ckpt/HPS_v2.1_compressed.pt; hpsv2's "
                    "ViT-H-14 config -> that tiny one"]


def flux_embeddings(flux: Path, out: Path, prompts=IMAGE_PROMPTS) -> Path:
    """``data/rl_embeddings`` as ``preprocess_flux_embedding.py`` writes it (per prompt i:
    ``prompt_embed/i.pt`` [L, D], ``pooled_prompt_embeds/i.pt`` [D], ``text_ids/i.pt`` (row i of what
    ``encode_prompt`` returns, as upstream indexes it) and ``videos2caption.json``), from the tiny FLUX
    folder's own text encoders."""
    import torch
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(str(flux), transformer=None, vae=None)
    items = []
    for folder in ("prompt_embed", "pooled_prompt_embeds", "text_ids"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        for index, caption in enumerate(prompts):
            prompt_embeds, pooled, text_ids = pipe.encode_prompt(prompt=[caption], prompt_2=[caption],
                                                                 max_sequence_length=8)
            name = f"{index}.pt"
            torch.save(prompt_embeds[0].clone(), out / "prompt_embed" / name)
            torch.save(pooled[0].clone(), out / "pooled_prompt_embeds" / name)
            torch.save(text_ids[0].clone(), out / "text_ids" / name)  # as upstream: text_ids[idx]
            items.append({"prompt_embed_path": name, "text_ids": name, "pooled_prompt_embeds_path": name,
                          "caption": caption})
    (out / "videos2caption.json").write_text(json.dumps(items, indent=4))
    return out / "videos2caption.json"


def flux_plan(work: Path, device: str) -> Plan:
    from ..tiny_models.flux import build_tiny_flux

    checkout = upstreams.checkout("DanceGRPO")
    flux = build_tiny_flux(work / "flux")
    embeddings = work / "rl_embeddings"
    flux_embeddings(flux, embeddings, IMAGE_PROMPTS * 2)
    hps_config, hps_replaced = tiny_hps(work / "hps")
    ranks = ranks_on(device)
    words, replaced = torchrun_command(checkout / FLUX_SCRIPT, FLUX_SMALL, ranks)
    accumulation = int(option_value(words, "--gradient_accumulation_steps"))
    served = Served.build(work, {HPSV2_URL: served_hpsv2(work / "served" / "HPSv2")})
    command = script_command(checkout / FLUX_SCRIPT, FLUX_SCRIPT, "torchrun",
                             lambda run: launch(words, ranks, by_name=True), lambda run: run / "DanceGRPO", EXPORTS)

    def run_cwd(run: Path) -> Path:
        return copy_checkout(checkout, run / "DanceGRPO", {"data/flux": flux, "data/rl_embeddings": embeddings,
                                                           "hps_ckpt": work / "hps" / "hps_ckpt"})

    def metrics(run: Path) -> list[float]:
        here = run / "DanceGRPO"
        return numbers_printed(run / "stdout.log", FLUX_PRINTS) + numbers_printed(
            here / "reward.txt", re.compile(rf"^(){FLOAT}$"))

    per_sample = int(option_value(words, "--num_generations")) // accumulation
    return Plan(
        target="dancegrpo-flux", cwd=checkout, command=command, script=FLUX_SCRIPT, runs_script=True,
        run_env=served.run_env,
        env=environment(device, {TINY_HPS_CONFIG_VARIABLE: str(hps_config)}), ranks=ranks,
        dataloader_workers=int(option_value(words, "--dataloader_num_workers")),
        steps=int(FLUX_SMALL["--max_train_steps"]) * per_sample,
        replacements=[*replaced,
                      "data/flux (FLUX.1-dev) -> a tiny FLUX pipeline folder in diffusers' layout",
                      "data/rl_embeddings -> preprocess_flux_embedding.py's layout from the tiny folder's text "
                      "encoders",
                      *hps_replaced, *(REPLACEMENTS_CPU if device == "cpu" else []), PINNED_STRUCTURE,
                      *SERVED_REPLACEMENTS, EXPORTS_REPLACED,
                      "DanceGRPO's own pip install -e . (its env_setup.sh) -> the checkout on PYTHONPATH"],
        metrics=metrics, checkpoint_saved=checkpoint_saved(words), run_cwd=run_cwd,
        steps_taken=steps_from_final_losses(accumulation))


#: what upstream's Hunyuan train_one_step prints on rank 0, one line per selected sample
HUNYUAN_PRINTS = re.compile(rf"^(vq loss/mq loss|vq/mq reward|vq advantage/mq advantage|final loss) "
                            rf"{FLOAT}(?: {FLOAT})?$")


def hunyuan_numbers(path: Path) -> list[float]:
    found = (HUNYUAN_PRINTS.match(line) for line in _lines(path))
    return [float(value) for m in found if m for value in m.groups()[1:] if value is not None]


def hunyuan_plan(work: Path, device: str) -> Plan:
    from ..tiny_models.text import VIDEO_PROMPTS

    checkout = upstreams.checkout("DanceGRPO")
    hunyuan = tiny_hunyuan(checkout, work / "HunyuanVideo")
    embeddings = work / "rl_embeddings"
    hunyuan_embeddings(embeddings, VIDEO_PROMPTS * 2)
    ranks = ranks_on(device)
    words, replaced = torchrun_command(checkout / HUNYUAN_SCRIPT, HUNYUAN_SMALL, ranks)
    accumulation = int(option_value(words, "--gradient_accumulation_steps"))
    served = Served.build(work)
    command = script_command(checkout / HUNYUAN_SCRIPT, HUNYUAN_SCRIPT, "torchrun",
                             lambda run: launch(words, ranks, by_name=True), lambda run: run / "DanceGRPO", EXPORTS)

    def run_cwd(run: Path) -> Path:
        return copy_checkout(checkout, run / "DanceGRPO", {"data/HunyuanVideo": hunyuan,
                                                           "data/rl_embeddings": embeddings})

    def metrics(run: Path) -> list[float]:
        here = run / "DanceGRPO"
        rewards = re.compile(rf"^(){FLOAT}$")
        return (hunyuan_numbers(run / "stdout.log") + numbers_printed(here / "vq_reward.txt", rewards)
                + numbers_printed(here / "mq_reward.txt", rewards))

    per_step = int(option_value(words, "--bestofn")) // accumulation
    return Plan(
        target="dancegrpo-hunyuan", cwd=checkout, command=command, script=HUNYUAN_SCRIPT, runs_script=True,
        run_env=served.run_env,
        env=environment(device, {IMPORT_STUBS_VARIABLE: HUNYUAN}), ranks=ranks,
        dataloader_workers=int(option_value(words, "--dataloader_num_workers")),
        steps=int(HUNYUAN_SMALL["--max_train_steps"]) * per_step,
        replacements=[*replaced,
                      "data/HunyuanVideo (HunyuanVideo) -> transformer/ and vae/ folders in diffusers' layout: "
                      "upstream's HunyuanVideoTransformer3DModel (1 double, 1 single, 1 refiner block, 2 heads of "
                      "16) and a 4-block 8-wide AutoencoderKLHunyuanVideo",
                      "data/rl_embeddings -> preprocess_hunyuan_embeddings.py's layout (prompt_embed/, "
                      "prompt_attention_mask/, videos2caption.json) holding seeded random 32-wide embeddings "
                      "(the tiny transformer's text width; the trainer reads only these files)",
                      *REPLACEMENTS_HUNYUAN, *(REPLACEMENTS_HUNYUAN_CPU if device == "cpu" else []),
                      *(REPLACEMENTS_CPU if device == "cpu" else []), PINNED_STRUCTURE,
                      *SERVED_REPLACEMENTS, EXPORTS_REPLACED,
                      "DanceGRPO's own pip install -e . (its env_setup.sh) -> the checkout on PYTHONPATH"],
        metrics=metrics, checkpoint_saved=checkpoint_saved(words), run_cwd=run_cwd,
        steps_taken=steps_from_final_losses(accumulation))


def steps_from_final_losses(accumulation: int) -> Callable[[Path], int]:
    """run -> optimizer steps taken: rank 0 prints one "final loss" per sample trained on, and
    upstream steps its optimizer every ``gradient_accumulation_steps`` of them."""
    def steps_taken(run: Path) -> int:
        return sum(line.startswith("final loss ") for line in _lines(run / "stdout.log")) // accumulation

    return steps_taken


def checkpoint_saved(words: list[str]) -> Callable[[Path], bool]:
    """run -> whether ``save_checkpoint`` wrote ``checkpoint-<--checkpointing_steps>-0`` (epoch 0) in
    ``--output_dir`` of the run's working copy."""
    step = option_value(words, "--checkpointing_steps")
    output = option_value(words, "--output_dir")

    def saved(run: Path) -> bool:
        folder = run / "DanceGRPO" / output / f"checkpoint-{step}-0"
        return (folder / "diffusion_pytorch_model.safetensors").is_file() and (folder / "config.json").is_file()

    return saved


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(errors="replace").splitlines()] if path.is_file() else []


def plan(target: str, work: Path, device: str) -> Plan:
    if target == "dancegrpo-flux":
        return flux_plan(work, device)
    if target == "dancegrpo-hunyuan":
        return hunyuan_plan(work, device)
    raise ValueError(f"{target}: not a DanceGRPO rehearsal target (they are: {', '.join(TARGETS)})")
