"""The one base of every FlowGRPO smoke run: upstream's real ``scripts/train_*.py`` ``main()`` through
absl on the CPU, with a tiny pipeline folder the first local process writes to disk and upstream's
own ``from_pretrained`` loads, launched as upstream launches the trainer (``accelerate launch``, gloo
on the CPU, or ``torchrun``): ``... -m otca_patch.smoke upstream/flow_grpo OUT --target NAME [--otca ...]``.

Each process imports the trainer file (untouched for vanilla; rewritten by its hook-point spec with
``--otca`` / ``--otca_observe``, exactly as a launched worker does: ``harness.load_upstream``) and
runs upstream's ``main`` with ``--config`` pointing at a tiny config (``flowgrpo_config.py``:
upstream's ``config/base.py`` with small sizes, a dataset and upstream's own ``jpeg_compressibility``
reward, the one ``multi_score`` reward that needs no downloaded model). What is not upstream's: the
tiny pipeline folder, the dataset files, the config's epoch stop, and a probe that records each
loss, each clipped gradient norm and a digest of the trained weights (``TrainingProbe`` for the
accelerate trainers, ``FsdpProbe`` for those without accelerate).

A trainer's smoke module defines its ``Sizes`` and ``TRAINER = FlowTrainer(...)`` (its upstream
file, how to build its tiny pipeline, its config keys over the common ones) and ``run = TRAINER.run``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..config import OtcaConfig
from ..files import atomic_write_text
from .environment import accelerate_as_on_gpus, decode_float_ids_as_transformers_4, smoke_device
from .harness import load_upstream
from .sizes import IMAGE_PROMPTS, SmokeSizes

PROMPTS = IMAGE_PROMPTS
#: what FlowGRPO's trainers import beyond otca-patch's own dependencies (the `flowgrpo` extra)
UPSTREAM_EXTRA = ("ml_collections", "absl", "peft", "wandb")


@dataclass
class Sizes(SmokeSizes):
    """Sizes of one smoke run: seconds per epoch on 2 CPU cores (steps are epochs: sampling + training)."""

    num_steps: int = 4  # sampling steps S
    timestep_fraction: float = 0.75  # trains T = int(S * fraction) steps
    resolution: int = 16
    batch_size: int = 4  # per process, for sampling and training
    num_image_per_prompt: int = 4
    reward_weight: float = 2.0  # jpeg_compressibility's weight in upstream's avg
    per_prompt_stat_tracking: int = 1  # 0: upstream's global normalisation (ints: the CLI's flags are typed by default)
    global_std: int = 0
    learning_rate: float = 1e-3
    seed: int = 42


@dataclass
class FlowSizes(Sizes):
    """The sizes of the newer trainers (9745241: FLUX, Qwen-Image, ...): the SD3 smoke's, at 32 pixels
    (FLUX and Qwen-Image latents are 1/8 of it, packed 2x2)."""

    resolution: int = 32


def config_overrides(sizes: Sizes, dataset: Path, model: Path) -> dict:
    """Dotted config keys -> values, over upstream's config/base.py (every FlowGRPO trainer reads these)."""
    return {
        "seed": sizes.seed, "logdir": "logs", "save_freq": 10**9, "allow_tf32": False,
        # upstream's mixed precision on a GPU; none on the CPU
        **({"mixed_precision": "no"} if smoke_device().type == "cpu" else {}),
        "use_lora": True, "dataset": str(dataset), "resolution": sizes.resolution, "prompt_fn": "general_ocr",
        "pretrained.model": str(model),
        "sample.num_steps": sizes.num_steps, "sample.eval_num_steps": 2, "sample.guidance_scale": 4.5,
        "sample.train_batch_size": sizes.batch_size, "sample.num_image_per_prompt": sizes.num_image_per_prompt,
        "sample.test_batch_size": 2, "sample.num_batches_per_epoch": 1, "sample.global_std": bool(sizes.global_std),
        "sample.noise_level": 0.7,
        "train.batch_size": sizes.batch_size, "train.learning_rate": sizes.learning_rate,
        "train.gradient_accumulation_steps": 1, "train.timestep_fraction": sizes.timestep_fraction,
        "train.clip_range": 1e-4, "train.adv_clip_max": 5, "train.beta": 0.0, "train.cfg": True,
        "reward_fn": {"jpeg_compressibility": sizes.reward_weight},
        "per_prompt_stat_tracking": bool(sizes.per_prompt_stat_tracking),
    }


def common_overrides(sizes: FlowSizes, dataset: Path, model: Path) -> dict:
    """The newer trainers' keys: the SD3 smoke's, with FLUX's guidance and no EMA (9745241's base
    config has ``train.ema``)."""
    return {**config_overrides(sizes, dataset, model), "sample.guidance_scale": 3.5,
            "sample.eval_guidance_scale": 3.5, "train.ema": False}


#: FLUX-family loops read ``transformer.module`` (DDP's wrapper, which accelerate adds on 2+ processes only)
ACCELERATE_DDP = {"min_processes": 2, "launch": "on 2 or more processes, as upstream launches it: accelerate launch "
                  "--num_processes 2 --multi_gpu -m otca_patch.smoke ... (its loop reads DDP's transformer.module)"}


def write_prompt_lists(folder: Path) -> None:
    """``train.txt`` / ``test.txt``: the prompt lists of upstream's ``general_ocr`` dataset."""
    atomic_write_text(folder / "train.txt", "\n".join(PROMPTS) + "\n")
    atomic_write_text(folder / "test.txt", "\n".join(PROMPTS[:2]) + "\n")


def tiny_model(folder: Path, build_model) -> Path:
    """The tiny pipeline folder, built by the first local process; the others wait for it."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        if not (folder / "model_index.json").is_file():
            folder.parent.mkdir(parents=True, exist_ok=True)
            partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
            build_model(partial)
            os.replace(partial, folder)
        return folder
    deadline = time.time() + 600
    while not (folder / "model_index.json").is_file():
        if time.time() > deadline:
            raise SystemExit(f"smoke: {folder} was not built by the first process")
        time.sleep(0.5)
    return folder


def write_config(out_dir: Path, upstream_dir: Path, sizes: Sizes, model: Path, extra: dict | None = None,
                 write_dataset: Callable[[Path], None] = write_prompt_lists,
                 base_overrides: Callable = config_overrides) -> str:
    """The ``--config`` value: the dataset files, a config file in ``out_dir`` and its JSON settings
    (``base_overrides`` and ``extra`` over upstream's config; atomic writes: several processes write
    the same files)."""
    dataset = out_dir / "dataset"
    dataset.mkdir(parents=True, exist_ok=True)
    write_dataset(dataset)
    settings = out_dir / "smoke_config.json"
    overrides = {**base_overrides(sizes, dataset, model), **(extra or {})}
    atomic_write_text(settings, json.dumps({"upstream_dir": str(upstream_dir), "epochs": sizes.steps,
                                            "overrides": overrides}, indent=2))
    config_file = out_dir / "smoke_config.py"
    atomic_write_text(config_file, "from otca_patch.smoke.flowgrpo_config import get_config  # noqa: F401\n")
    return f"{config_file}:{settings}"


def _digest(parameters) -> str:
    digest = hashlib.sha256()
    for name, parameter in parameters:
        if parameter.requires_grad:
            digest.update(name.encode())
            digest.update(parameter.detach().cpu().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


class TrainingProbe:
    """Test probe (not part of the layer): upstream's ``Accelerator`` replaced by a subclass that
    records every loss passed to ``backward``, every clipped gradient norm, and the prepared model."""

    def __init__(self, module):
        self.losses, self.grad_norms, self.model = [], [], None
        probe = self

        class RecordingAccelerator(module.Accelerator):
            def backward(self, loss, **kwargs):
                probe.losses.append(float(loss.detach()))
                return super().backward(loss, **kwargs)

            def clip_grad_norm_(self, parameters, max_norm, norm_type=2):
                norm = super().clip_grad_norm_(parameters, max_norm, norm_type)
                probe.grad_norms.append(float(norm))
                return norm

            def prepare(self, *args, **kwargs):
                prepared = super().prepare(*args, **kwargs)
                probe.model = prepared[0]
                return prepared

        module.Accelerator = RecordingAccelerator

    def weights_digest(self) -> str:
        return _digest(self.model.named_parameters())


class FsdpProbe:
    """The probe of a trainer without accelerate (Qwen-Image's FSDP loop): every ``loss.backward()``
    and every ``torch.nn.utils.clip_grad_norm_`` of this process, and the trained weights at the end."""

    def __init__(self, module):
        self.losses, self.grad_norms, self.parameters = [], [], []
        probe, backward, clip = self, torch.Tensor.backward, torch.nn.utils.clip_grad_norm_

        def recording_backward(tensor, *args, **kwargs):
            if tensor.dim() == 0 and tensor.requires_grad:
                probe.losses.append(float(tensor.detach()))
            return backward(tensor, *args, **kwargs)

        def recording_clip(parameters, *args, **kwargs):
            parameters = list(parameters)
            norm = clip(parameters, *args, **kwargs)
            probe.grad_norms.append(float(norm))
            probe.parameters = parameters
            return norm

        torch.Tensor.backward = recording_backward
        torch.nn.utils.clip_grad_norm_ = recording_clip

    def weights_digest(self) -> str:
        return _digest(("", parameter) for parameter in self.parameters)  # FSDP flattens the names away


@dataclass(frozen=True)
class FlowTrainer:
    """One FlowGRPO trainer's smoke: ``upstream_file`` (in the checkout), ``module_name`` (imported as
    ``flowgrpo_<module_name>``), ``build_model(folder)`` (its tiny pipeline), ``model_env`` (a variable
    naming a pipeline folder shared by several runs, for tests; default ``tiny_<model_folder>`` beside
    the reward folder), ``overrides(sizes)`` (its config keys over ``base_overrides``), ``probe`` (a
    probe class), ``write_dataset(folder)`` (its dataset files; default: upstream's ``general_ocr``
    prompt lists), ``prepare(module)`` (CPU stand-ins the loaded module needs), ``starts_wandb``
    (False where the trainer calls ``wandb.log`` without ``wandb.init``: GRPO-Guard, whose init is
    commented out; the smoke starts a disabled run), and the launch upstream's ``main`` needs."""

    upstream_file: str
    module_name: str
    build_model: Callable[[Path], Path]
    model_env: str
    overrides: Callable[[FlowSizes], dict] = lambda sizes: {}
    probe: type = TrainingProbe
    extra_packages: tuple = field(default=())
    write_dataset: Callable[[Path], None] = write_prompt_lists
    prepare: Callable = lambda module: None
    base_overrides: Callable = common_overrides  # SD3's trainers: config_overrides
    model_folder: str = ""  # default: the module name
    starts_wandb: bool = True
    min_processes: int = 1  # fewer processes cannot run upstream's main
    needs_torchrun: bool = False  # upstream's main starts its own process group from torchrun's variables
    launch: str = ""  # how to launch it, for the error

    def check_launch(self) -> None:
        """A launch upstream's ``main`` cannot run in is refused before anything loads, saying how to launch."""
        if int(os.environ.get("WORLD_SIZE", "1")) < self.min_processes or (self.needs_torchrun and "RANK" not in os.environ):
            raise SystemExit(f"smoke: {self.upstream_file} must be launched {self.launch}")

    def write_config(self, out_dir: Path, upstream_dir: Path, sizes: FlowSizes, model: Path) -> str:
        return write_config(out_dir, upstream_dir, sizes, model, self.overrides(sizes), self.write_dataset,
                            self.base_overrides)

    def tiny_pipeline(self, reward_root: Path) -> Path:
        default = reward_root.parent / f"tiny_{self.model_folder or self.module_name}"
        return tiny_model(Path(os.environ.get(self.model_env) or default).resolve(), self.build_model)

    def run(self, upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: FlowSizes, reward_root: Path,
            probe=None) -> dict:
        missing = [name for name in UPSTREAM_EXTRA + self.extra_packages if importlib.util.find_spec(name) is None]
        if missing:
            raise SystemExit(f"smoke: FlowGRPO's trainer imports {', '.join(missing)}, which this environment "
                             f"lacks: pip install 'otca-patch[flowgrpo]'")
        self.check_launch()
        accelerate_as_on_gpus()
        decode_float_ids_as_transformers_4()
        os.environ.setdefault("WANDB_MODE", "disabled")
        upstream_dir, out_dir = upstream_dir.resolve(), out_dir.resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        model = self.tiny_pipeline(reward_root)
        config_flag = self.write_config(out_dir, upstream_dir, sizes, model)
        os.chdir(out_dir)  # upstream's logs/ and checkpoints go here
        module = load_upstream(upstream_dir, self.upstream_file, config, f"flowgrpo_{self.module_name}")
        self.prepare(module)
        recording = self.probe(module)
        test_probe = probe(module) if probe is not None else None  # --probe: a test's recorder

        from absl import app

        if not self.starts_wandb:
            import wandb

            wandb.init(mode="disabled")
        try:
            app.run(module.main, argv=[str(upstream_dir / self.upstream_file), f"--config={config_flag}"])
        except SystemExit as stop:  # the config's epoch stop; anything else is a failure
            if stop.code not in (0, None):
                raise
        import torch.distributed as dist

        rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        result = {"otca": config.otca, "observe": config.otca_observe,
                  "mode": config.otca_mode if config.active else None, "world_size": world_size,
                  "sizes": asdict(sizes), "losses": recording.losses, "grad_norms": recording.grad_norms,
                  "weights_digest": recording.weights_digest()}
        (out_dir / f"smoke_rank{rank}.json").write_text(json.dumps(result, indent=2))
        if test_probe is not None:
            test_probe.save(out_dir / f"terms_rank{rank}.pt")
        if rank == 0:
            (out_dir / "smoke.json").write_text(json.dumps(result, indent=2))
            print(f"smoke: {sizes.steps} epochs, {len(recording.losses)} backward passes, losses "
                  f"{recording.losses}", flush=True)
        return result
