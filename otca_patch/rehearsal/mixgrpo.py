"""MixGRPO's rehearsal (mixgrpo-flux): ``fastvideo/train_grpo_flux.py`` run by the ``torchrun`` line
inside the ``pdsh`` string of ``scripts/finetune/finetune_flux_grpo_MixGRPO.sh``, its variables
expanded, on one node, in a per-run copy of the checkout where its README's set-up line (``git clone``
of HPSv2, served locally) has run.

Not the script itself: it starts every trainer through ``pdsh``, whose remote shells do not inherit
the launch's environment, so ``otca-patch launch --otca`` refuses it before it runs; a user runs its
torchrun line on each node instead (README), and so does the rehearsal, in all three runs alike.

MixGRPO's ``main`` never ends by itself (it loops over 1,000,000 epochs of ``--max_train_steps``
steps): the rehearsal stops the launch once 2 training steps are complete and the checkpoint is
saved, and compares what those steps logged."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import upstreams
from .dancegrpo import (FLOAT, IMAGE_PROMPTS, copy_checkout, environment, flux_embeddings, launch, numbers_printed,
                        ranks_on, tiny_hps)
from .launch_script import expanded_launcher_line, option_value, set_options, split_launcher
from .plan import Plan
from .verbatim import HPSV2_URL, SET_UP_SERVED, Served, served_hpsv2
from .standins import IMPORT_STUBS_VARIABLE, PINNED_STRUCTURE, REPLACEMENTS_CPU, TINY_HPS_CONFIG_VARIABLE

TARGETS = ("mixgrpo-flux",)
SCRIPT = "scripts/finetune/finetune_flux_grpo_MixGRPO.sh"
#: training steps whose logs are compared; the launch is stopped once the next one has begun
STEPS = 2
#: upstream's values the CPU cannot afford, or that need what this machine lacks -> the rehearsal's;
#: its 12 generations, 25 sampling steps and SDE window of 4 are kept
SMALL = {"--max_train_steps": "2", "--checkpointing_steps": "2", "--h": "32", "--w": "32",
         "--reward_model": "hpsv2"}
#: what MixGRPO's train_one_step prints on rank 0, one line each per sample
PRINTS = re.compile(rf"^(advantage|final loss|kl loss) {FLOAT}$")
REWARD_LINE = re.compile(rf"^(HPSClipRewardModel): {FLOAT}$")


def plan(target: str, work: Path, device: str) -> Plan:
    if target != "mixgrpo-flux":
        raise ValueError(f"{target}: not a MixGRPO rehearsal target (they are: {', '.join(TARGETS)})")
    checkout, flux, embeddings, hps_config, hps_replaced = checkout_and_stand_ins(work)
    ranks = ranks_on(device)
    launcher, script, arguments = split_launcher(expanded_launcher_line(checkout / SCRIPT))
    words = [script, *set_options(arguments, SMALL)]
    outputs = RunOutputs.of(words)

    served = Served.build(work, {HPSV2_URL: served_hpsv2(work / "served" / "HPSv2")})

    def run_env(run: Path) -> dict[str, str]:  # the shims on PATH; nothing here runs pip
        return served.environment(run, Path(sys.executable))

    def run_cwd(run: Path) -> Path:
        copy = copy_checkout(checkout, run / "MixGRPO", {"data/flux": flux, "data/rl_embeddings": embeddings,
                                                         "hps_ckpt": work / "hps" / "hps_ckpt"})
        # the README's set-up line, before the launch as a user runs it: HPSv2/hpsv2 is what the trainer imports
        subprocess.run(["git", "clone", HPSV2_URL], cwd=copy, env={**os.environ, **run_env(run)}, check=True,
                       capture_output=True)
        return copy

    return Plan(
        target="mixgrpo-flux", cwd=checkout, command=lambda run: launch(words, ranks),
        script=f"{SCRIPT}:torchrun", run_env=run_env,
        env=environment(device, {TINY_HPS_CONFIG_VARIABLE: str(hps_config), IMPORT_STUBS_VARIABLE: "mixgrpo",
                                 "PYTHONUNBUFFERED": "1"}),
        ranks=ranks, dataloader_workers=int(option_value(words, "--dataloader_num_workers")),
        steps=STEPS * outputs.per_step // outputs.accumulation,
        replacements=replacement_lines(launcher, ranks, hps_replaced, device),
        metrics=outputs.metrics, checkpoint_saved=outputs.checkpoint_saved, run_cwd=run_cwd,
        steps_taken=outputs.steps_taken, finished=outputs.finished)


def checkout_and_stand_ins(work: Path) -> tuple[Path, Path, Path, Path, list[str]]:
    """MixGRPO's checkout and what stands in for its downloads, built under ``work``: the tiny FLUX
    pipeline folder, its prompt embeddings, and the tiny HPS model's config with the lines saying
    what it replaced."""
    from ..rewards.clip_libs import import_hpsv2_open_clip
    from ..tiny_models.flux import build_tiny_flux

    checkout = upstreams.checkout("MixGRPO")
    import_hpsv2_open_clip()  # its wheel omits the tokenizer vocabulary the HPSv2 checkout has
    flux = build_tiny_flux(work / "flux")
    embeddings = work / "rl_embeddings"
    flux_embeddings(flux, embeddings, IMAGE_PROMPTS * 2)
    (embeddings / "prompt.json").write_bytes((embeddings / "videos2caption.json").read_bytes())
    hps_config, hps_replaced = tiny_hps(work / "hps")
    return checkout, flux, embeddings, hps_config, hps_replaced


@dataclass(frozen=True)
class RunOutputs:
    """Where a run of the launch ``words`` writes, and what it printed, read back per run folder."""

    out: Path  # the output folder, relative to the run's checkout copy
    rewards_file: Path  # rank 0's rewards, one line per training step, relative to the checkout copy
    per_step: int  # samples per rank and training step
    accumulation: int  # samples per optimizer step

    @classmethod
    def of(cls, words: list[str]) -> "RunOutputs":
        strategy, experiment = option_value(words, "--training_strategy"), option_value(words, "--experiment_name")
        out = Path(option_value(words, "--output_dir")) / f"{strategy}_{experiment}"
        rewards_file = out / f"flux_{option_value(words, '--reward_model')}_{strategy}_{experiment}.txt"
        return cls(out=out, rewards_file=rewards_file, per_step=int(option_value(words, "--num_generations")),
                   accumulation=int(option_value(words, "--gradient_accumulation_steps")))

    def prints(self, run: Path) -> list[str]:
        path = run / "stdout.log"
        return [line.strip() for line in path.read_text(errors="replace").splitlines()] if path.is_file() else []

    def metrics(self, run: Path) -> list[float]:
        """The rewards and per-sample prints of the first STEPS training steps (a stopped run may have begun more)."""
        kinds = {}
        for line in self.prints(run):
            found = PRINTS.match(line)
            if found:
                kinds.setdefault(found.group(1), []).append(float(found.group(2)))
        logged = [v for kind in ("advantage", "final loss", "kl loss")
                  for v in kinds.get(kind, [])[:STEPS * self.per_step]]
        return logged + numbers_printed(run / "MixGRPO" / self.rewards_file, REWARD_LINE)[:STEPS]

    def steps_taken(self, run: Path) -> int:
        losses = [line for line in self.prints(run) if line.startswith("final loss ")][:STEPS * self.per_step]
        return len(losses) // self.accumulation

    def checkpoint_saved(self, run: Path) -> bool:
        return any((run / "MixGRPO" / self.out).glob("checkpoint-2-0/diffusion_pytorch_model.safetensors"))

    def finished(self, run: Path) -> bool:
        """STEPS training steps done: step STEPS + 1 has logged its reward (rank 0 writes it after sampling)."""
        return (len(numbers_printed(run / "MixGRPO" / self.rewards_file, REWARD_LINE)) > STEPS
                and self.checkpoint_saved(run))


def replacement_lines(launcher: list[str], ranks: int, hps_replaced: list[str], device: str) -> list[str]:
    """One line per thing the rehearsal replaces in upstream's launch (``launcher``: the torchrun line's
    launcher words), its models and its environment."""
    return [f"pdsh -w ^hostfile \"...; {' '.join(launcher)} ...\" (4 nodes of 8 GPUs) -> that torchrun "
            f"line on one node, {ranks} processes, its shell variables expanded (--wandb_key '' as an "
            f"empty value)",
            "upstream's sizes -> " + ", ".join(f"{k} {v}" for k, v in SMALL.items() if k != "--reward_model"),
            "--reward_model multi_reward -> hpsv2 (ImageReward and PickScore load from the Hugging Face hub, "
            "UnifiedReward is a server): one of the script's own choices",
            "the endless epoch loop -> stopped (SIGTERM) once 2 training steps and the checkpoint are done; "
            "stdout unbuffered so that what they printed is all there",
            "data/flux (FLUX.1-dev) -> a tiny FLUX pipeline folder in diffusers' layout",
            "data/rl_embeddings/prompt.json -> preprocess_flux_embedding.py's layout from the tiny text "
            "encoders",
            *hps_replaced,
            "the README's git clone of HPSv2, run in each run's copy before the launch: " + SET_UP_SERVED[1],
            "clip (OpenAI's, a git install) and ImageReward -> import stubs where they do not import",
            *(REPLACEMENTS_CPU if device == "cpu" else []), PINNED_STRUCTURE,
            "pip install -e . -> the checkout on PYTHONPATH; wandb disabled (upstream's script sets "
            "WANDB_DISABLED=true)"]
