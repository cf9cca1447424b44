"""The FlowGRPO family of the launch rehearsal: upstream's own ``scripts/train_*.py`` started by the
launch upstream's scripts use (``accelerate launch --config_file scripts/accelerate_configs/...`` for
SD3 and FLUX, ``torchrun --standalone`` with torch FSDP for Qwen-Image) on 2 processes, with
``--config`` naming upstream's own named config (``config/grpo.py:NAME``) shrunk to CPU sizes.

Each run works in its own copy of the checkout (upstream writes ``wandb/`` and its checkpoints under
its working directory). What the checks read is what upstream itself logs and writes: the numbers of
every ``wandb.log`` of rank 0 (losses and rewards, one record per optimizer step with ``loss``), copied
as each call is made (``logged_numbers``), and the checkpoint folders ``save_ckpt`` /
``save_fsdp_checkpoint`` write.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import upstreams
from .launch_script import launcher_line, set_options, split_launcher
from .logged_numbers import FILE_NAME as LOGGED_FILE
from .logged_numbers import logged_history
from .plan import NotRunnable, Plan
from .verbatim import RUN_ENVIRONMENT, Served, script_command

TARGETS = ("flowgrpo-sd3", "flowgrpo-flux", "flowgrpo-qwenimage")
RANKS = 2
EPOCHS = 3  # one optimizer step per epoch at these sizes (one sample batch, gradients accumulated over its steps)
SAVE_FREQ = 2  # a checkpoint after 2 optimizer steps, inside the 3 epochs
#: the loss and reward keys of upstream's ``wandb.log`` calls that the vanilla comparison reads
METRIC_PREFIXES = ("reward_", "eval_reward_")
METRIC_SUFFIXES = ("loss",)
PINNED, NEWER = "ac4c86e", "9745241"


@dataclass(frozen=True)
class Target:
    """One FlowGRPO trainer as upstream launches it."""

    commits: tuple[str, ...]  # upstream commits whose spec holds on ``script``, the preferred first
    script: str
    launch_script: str  # upstream's launch script whose line the rehearsal runs
    model: str  # what upstream's config loads, for the replacement line
    model_folder: str
    build_model: Callable[[Path], Path]
    sizes: Callable[[], object]  # the smoke's sizes of this trainer
    overrides: Callable[[object, Path, Path], dict]  # sizes, dataset, model -> config keys
    launcher: str  # "accelerate" or "torchrun"
    workers: int  # the most DataLoader workers upstream's script gives a loader this run iterates
    extra: list[str] = field(default_factory=list)  # replacements of this trainer only
    min_ranks: int = 1  # fewer processes cannot run upstream's main
    decodes_float_ids: bool = False  # its loop decodes prompt ids gathered as floats
    launch_options: dict = field(default_factory=dict)  # launcher options replaced for the CPU


def _sd3() -> Target:
    from ..smoke.flowgrpo import trainer_named

    sd3 = trainer_named("flowgrpo-sd3")
    # the SD3 spec holds on 9745241 too, the one FlowGRPO snapshot the GPU check's payload carries
    return Target(commits=(PINNED, NEWER), script=sd3.upstream_file,
                  launch_script="scripts/single_node/grpo.sh", model="stabilityai/stable-diffusion-3.5-medium",
                  model_folder="tiny_sd3", build_model=sd3.model.build, sizes=sd3.sizes, overrides=sd3.config_keys,
                  launcher="accelerate", workers=8)


def _flux() -> Target:
    from ..smoke.flowgrpo import trainer_named

    flux = trainer_named("flowgrpo-flux")
    return Target(commits=(NEWER,), script=flux.upstream_file,
                  launch_script="scripts/single_node/grpo_flux.sh", model="black-forest-labs/FLUX.1-dev",
                  model_folder="tiny_flux", build_model=flux.model.build, sizes=flux.sizes,
                  overrides=flux.config_keys, launcher="accelerate", workers=8,
                  extra=["accelerate config: scripts/accelerate_configs/multi_gpu.yaml (DDP) for upstream's "
                         "deepspeed_zero2.yaml: DeepSpeed needs CUDA and is not installed here"],
                  launch_options={"--config_file": "scripts/accelerate_configs/multi_gpu.yaml"}, min_ranks=2)


def _qwenimage() -> Target:
    from ..smoke.flowgrpo import trainer_named

    qwen = trainer_named("flowgrpo-qwenimage")
    # evaluation runs at epochs > 0 only, and the config's epoch stop asks before it: the run iterates
    # the training loader (1 worker), not the 8-worker test loader
    return Target(commits=(NEWER,), script=qwen.upstream_file,
                  launch_script="scripts/single_node/grpo_qwenimage.sh", model="Qwen/Qwen-Image",
                  model_folder="tiny_qwenimage", build_model=qwen.model.build, sizes=qwen.sizes,
                  overrides=qwen.config_keys, launcher="torchrun", workers=1,
                  extra=["activation checkpointing and FSDP optimizer offload off (config keys; the smoke's sizes)"],
                  decodes_float_ids=True)


TARGET_BUILDERS = {"flowgrpo-sd3": _sd3, "flowgrpo-flux": _flux, "flowgrpo-qwenimage": _qwenimage}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def checkout(commit: str, script: str) -> Path:
    """FlowGRPO's checkout at ``commit``, which must hold ``script``: the pinned one from ``upstreams``
    (``$OTCA_UPSTREAM_FLOW_GRPO`` or its snapshot); a newer one from ``$OTCA_UPSTREAM_FLOW_GRPO_<COMMIT>``
    or its snapshot, else ``$OTCA_UPSTREAM_FLOW_GRPO`` where that holds ``script``."""
    variable = f"OTCA_UPSTREAM_FLOW_GRPO_{commit}"
    if commit == PINNED:
        found = upstreams.checkout("flow_grpo")
    elif os.environ.get(variable):
        found = Path(os.environ[variable]).resolve()
    else:
        archives = [place for place in upstreams.snapshot_places(f"flow_grpo-{commit}.tar.gz") if place.is_file()]
        given = os.environ.get("OTCA_UPSTREAM_FLOW_GRPO")
        found = upstreams.unpack(archives[0]) if archives else Path(given).resolve() if given else None
    if found is None or not (found / script).is_file():
        raise upstreams.UpstreamMissing(f"no FlowGRPO checkout with {script} (commit {commit}): set {variable} or put "
                                        f"flow_grpo-{commit}.tar.gz in {upstreams.snapshot_places('')[0].parent}")
    return found


def first_checkout(commits: tuple[str, ...], script: str) -> tuple[str, Path]:
    """(commit, checkout) of the first of ``commits`` found; else the first one's error."""
    errors = []
    for commit in commits:
        try:
            return commit, checkout(commit, script)
        except upstreams.UpstreamMissing as error:
            errors.append(error)
    raise errors[0]


def qwen_transformers() -> str | None:
    """A folder holding transformers >= 4.49 (Qwen2.5-VL) to put first on PYTHONPATH, when the installed
    one is older: ``$OTCA_QWEN_TRANSFORMERS``, else ``<venv>/qwen-transformers`` (scripts/setup.sh)."""
    import importlib.util

    if importlib.util.find_spec("transformers.models.qwen2_5_vl") is not None:
        return None
    folder = Path(os.environ.get("OTCA_QWEN_TRANSFORMERS") or Path(sys.prefix) / "qwen-transformers")
    if not (folder / "transformers").is_dir():
        raise FileNotFoundError(f"FlowGRPO's Qwen-Image trainer needs transformers >= 4.49 and {folder} has none: "
                                "run scripts/setup.sh or set OTCA_QWEN_TRANSFORMERS")
    return str(folder)


def build_model(spec: Target, folder: Path, paths: list[str]) -> Path:
    """The tiny pipeline folder; built in a child process when it needs ``paths`` first on the path
    (a newer transformers than this process imported)."""
    if not paths:
        return spec.build_model(folder)
    module, name = spec.build_model.__module__, spec.build_model.__name__
    code = f"import sys; from {module} import {name}; {name}(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code, str(folder)], env=env, check=True)
    return folder


def logged_metrics(history: list[dict]) -> list[float]:
    """The losses and rewards of ``history``, record by record, keys sorted within a record."""
    return [float(record[key]) for record in history for key in sorted(record)
            if key.startswith(METRIC_PREFIXES) or key.endswith(METRIC_SUFFIXES)]


def optimizer_steps(history: list[dict]) -> int:
    """Upstream logs ``info`` (with ``loss``) once per optimizer step (``accelerator.sync_gradients``)."""
    return sum(1 for record in history if "loss" in record)


def checkpoint_after_training(run_cwd: Path) -> bool:
    """A ``checkpoint-N`` folder with N >= 1 (saved after training steps) that holds safetensors weights
    (``save_ckpt``: LoRA under ``checkpoints/checkpoint-N/lora``; ``save_fsdp_checkpoint``: ``model.safetensors``)."""
    for folder in run_cwd.glob("**/checkpoint-*"):
        step = folder.name.removeprefix("checkpoint-")
        if step.isdigit() and int(step) >= 1 and any(folder.rglob("*.safetensors")):
            return True
    return False


#: launcher -> the module it runs, where its program is not installed beside this interpreter or on PATH
LAUNCHER_MODULES = {"accelerate": "accelerate.commands.accelerate_cli", "torchrun": "torch.distributed.run"}


def launcher_program(launcher: str) -> list[str]:
    """``accelerate`` / ``torchrun`` by name, as upstream's script writes it, where this interpreter's
    folder or PATH holds it (a run's PATH finds it), else ``python -m`` its module."""
    found = shutil.which(launcher, path=str(Path(sys.executable).parent)) or shutil.which(launcher)
    return [launcher] if found else ["python", "-m", LAUNCHER_MODULES[launcher]]


def ranks_on(device: str, spec: Target) -> int:
    """2 processes on the CPU; on GPUs one per GPU, at most 2 (NCCL refuses two ranks on one GPU)."""
    if device == "cpu":
        return RANKS
    import torch

    ranks = max(1, min(RANKS, torch.cuda.device_count()))
    if ranks < spec.min_ranks:
        raise NotRunnable(f"upstream's {spec.script} runs on no fewer than {spec.min_ranks} processes (it reads DDP's "
                         f"transformer.module), one GPU each, and this machine has {torch.cuda.device_count()} GPU(s)")
    return ranks


def transformers_major(paths: list[str]) -> int:
    """The major version of the transformers the runs import (the first of ``paths`` that holds one, else
    this process's)."""
    import importlib.metadata

    for path in paths:
        found = list(Path(path).glob("transformers-*.dist-info"))
        if found:
            return int(found[0].name.removeprefix("transformers-").split(".")[0])
    return int(importlib.metadata.version("transformers").split(".")[0])


def switched_off(overrides: dict) -> str:
    """What the CPU sizes switch off of upstream's training, for the config's replacement line."""
    off = ["KL term"] if overrides.get("train.beta") == 0 else []
    off += ["EMA"] if overrides.get("train.ema") is False else []
    return f", {' and '.join(off)} off" if off else ""


#: launcher -> (its option for the processes per machine, its option for the port)
LAUNCH_OPTIONS = {"accelerate": ("--num_processes", "--main_process_port"),
                  "torchrun": ("--nproc_per_node", "--master_port")}


def upstream_launch(source: Path, spec: Target) -> tuple[list[str], str, list[str], list[str]]:
    """Upstream's launch line from ``spec.launch_script``: (the launcher and its options, the trainer,
    its arguments, [config file, config name] of its ``--config``)."""
    launcher, script, arguments = split_launcher(launcher_line(source / spec.launch_script, spec.launcher))
    if script != spec.script:
        raise ValueError(f"{spec.launch_script} launches {script}, not {spec.script}")
    config = next((arguments[i + 1] for i, word in enumerate(arguments[:-1]) if word == "--config"), "")
    if ":" not in config:
        raise ValueError(f"{spec.launch_script} passes no --config FILE:NAME to {script}")
    return launcher, script, arguments, config.split(":", 1)


def plan(target: str, work: Path, device: str) -> Plan:
    if target not in TARGET_BUILDERS:
        raise ValueError(f"unknown FlowGRPO rehearsal target {target!r}; known: {', '.join(TARGETS)}")
    spec = TARGET_BUILDERS[target]()
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    commit, source = first_checkout(spec.commits, spec.script)
    paths = [path for path in [qwen_transformers()] if path] if spec.launcher == "torchrun" else []
    model = build_model(spec, work / spec.model_folder, paths)
    dataset = work / "dataset"
    dataset.mkdir(exist_ok=True)
    from ..tiny_models.datasets import write_prompt_lists

    write_prompt_lists(dataset)
    on_cpu = device == "cpu"
    sizes, overrides = run_overrides(spec, dataset, model, on_cpu)
    ranks = ranks_on(device, spec)
    launcher, script, arguments, named = upstream_launch(source, spec)
    stand_ins = ([] if not on_cpu else ["accelerate_on_cpu"] if spec.launcher == "accelerate" else ["fsdp_on_cpu"])
    float_ids = spec.decodes_float_ids and transformers_major(paths) >= 5
    stand_ins += ["float_ids_as_transformers_4"] if float_ids else []

    def run_cwd(run: Path) -> Path:
        copy = Path(run).resolve() / "flow_grpo"
        if not copy.is_dir():
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".git", "wandb", "logs"))
        return copy

    def words(run: Path) -> list[str]:
        run = Path(run).resolve()
        run.mkdir(parents=True, exist_ok=True)
        settings = run / "rehearsal_settings.json"
        settings.write_text(json.dumps({"upstream_dir": str(run_cwd(run)), "named": named,
                                        "epochs": EPOCHS, "overrides": overrides, "stand_ins": stand_ins}, indent=2))
        config = run / "rehearsal_config.py"
        config.write_text("from otca_patch.rehearsal.flowgrpo_config import get_config  # noqa: F401\n")
        processes, port = LAUNCH_OPTIONS[spec.launcher]
        options = {**spec.launch_options, processes: str(ranks), port: str(_free_port())}
        launch = set_options([*launcher_program(spec.launcher), *launcher[1:]], options)
        return [*launch, script, *set_options(arguments, {"--config": f"{config}:{settings}"})]

    command = script_command(source / spec.launch_script, spec.launch_script, spec.launcher, words, run_cwd)
    kept = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    env = {"PYTHONPATH": os.pathsep.join([*paths, ".", *kept]),
           "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    replacements = replacement_lines(spec, commit, model, ranks, named, sizes, overrides, on_cpu, float_ids, paths)
    return Plan(target=target, cwd=source, command=command, env=env, ranks=ranks, dataloader_workers=spec.workers,
                steps=EPOCHS, replacements=replacements, script=spec.launch_script, runs_script=True,
                run_env=Served.build(work).run_env,
                metrics=lambda run: logged_metrics(logged_history(run)),
                checkpoint_saved=lambda run: checkpoint_after_training(run_cwd(run)),
                run_cwd=run_cwd, steps_taken=lambda run: optimizer_steps(logged_history(run)))


def run_overrides(spec: Target, dataset: Path, model: Path, on_cpu: bool) -> tuple[object, dict]:
    """The smoke's sizes of ``spec`` for EPOCHS epochs, and the config keys the run sets: those of the smoke,
    a checkpoint every SAVE_FREQ steps, upstream's own save_dir, and no mixed precision on the CPU
    (upstream's own on GPUs)."""
    sizes = spec.sizes()
    sizes.steps = EPOCHS
    overrides = {**spec.overrides(sizes, dataset, model), "save_freq": SAVE_FREQ}
    # upstream's named config keeps its own save_dir (under logs/), relative to the run's checkout copy
    overrides.pop("logdir", None)
    if on_cpu:
        overrides["mixed_precision"] = "no"
    else:
        overrides.pop("mixed_precision", None)
    return sizes, overrides


def replacement_lines(spec: Target, commit: str, model: Path, ranks: int, named: list[str], sizes, overrides: dict,
                      on_cpu: bool, float_ids: bool, paths: list[str]) -> list[str]:
    """One line per thing the rehearsal replaces in upstream's launch of ``spec`` (flow_grpo ``commit``):
    the model, the launch on ``ranks`` processes, the config ``named`` with ``sizes`` and ``overrides``,
    and what stands in for the GPU on the CPU, for transformers 5 (``float_ids``) and for Qwen (``paths``)."""
    replacements = [
        f"model: a tiny pipeline in diffusers' layout, {model} (config.pretrained.model; upstream: {spec.model})",
        f"launch: upstream's {spec.launch_script} (flow_grpo {commit}) run as it is, its launch line on {ranks} "
        f"processes, a free port, --config naming the rehearsal's config file (below)",
        f"config: upstream's {':'.join(named)} with CPU sizes (resolution {sizes.resolution}, "
        f"{sizes.num_steps} sampling steps, {sizes.batch_size} images per process, {sizes.num_image_per_prompt} per "
        f"prompt, {EPOCHS} epochs ended by the config's eval_freq, save_freq {SAVE_FREQ}{switched_off(overrides)})",
        "reward: upstream's jpeg_compressibility, which needs no downloaded model, for the named config's rewards",
        "dataset: the prompt lists train.txt / test.txt in upstream's general_ocr layout",
        "flow_grpo imported from the checkout by PYTHONPATH=. (upstream: pip install -e .)",
        RUN_ENVIRONMENT,
        "wandb offline (WANDB_MODE=offline; no network); HF_HUB_OFFLINE=1; the numbers of each wandb.log call "
        f"copied to RUN/{LOGGED_FILE} as it is made (torch's agent may stop wandb's service before its offline file is written)",
        *spec.extra,
    ]
    if on_cpu:
        replacements.append("mixed precision: no (config.mixed_precision; upstream: fp16/bf16 on GPUs)")
        replacements.append(
            "process group: gloo on the CPU, accelerate's MULTI_CPU (ACCELERATE_USE_CPU, set by the config)"
            if spec.launcher == "accelerate" else
            "upstream's init_distributed / fsdp_wrapper on the CPU (set by the config): nccl -> gloo, "
            "torch.cuda.set_device a no-op, FSDP's device_id the CPU")
    if float_ids:
        replacements.append("prompt ids gathered as floats decoded as integers, as transformers 4 (upstream's pin) "
                            "does (set by the config; transformers 5's tokenizers reject floats)")
    if paths:
        replacements.append(f"transformers >= 4.49 (Qwen2.5-VL) first on PYTHONPATH: {paths[0]}")
    return replacements
