"""What every FlowGRPO smoke run shares: upstream's real ``scripts/train_*.py`` ``main()`` on the CPU
with a tiny pipeline it builds, launched like upstream, with accelerate (gloo on the CPU):
``accelerate launch --num_processes N -m otca_patch.smoke upstream/flow_grpo OUT --target NAME [--otca ...]``.

Each process imports the trainer file (untouched for vanilla; rewritten by its hook-point spec with
``--otca`` / ``--otca_observe``, exactly as a launched worker does) and runs upstream's ``main``
through absl's ``app.run`` with ``--config`` pointing at a tiny config (``flowgrpo_config.py``:
upstream's ``config/base.py`` with small sizes, a prompt dataset and upstream's own
``jpeg_compressibility`` reward, the one ``multi_score`` reward that needs no downloaded model).
What is not upstream's: the tiny pipeline folder it loads, the dataset files, the config's epoch
stop, and a probe (``TrainingProbe``) that records each loss, each clipped gradient norm and a
digest of the trained weights for the tests.

A trainer's smoke module is a ``FlowTrainer`` (its file, its tiny pipeline, its config keys) and
its ``Sizes``; ``run`` here does the rest.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from ..config import OtcaConfig
from ..files import atomic_write_text
from .environment import accelerate_as_on_gpus, smoke_device
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


@dataclass(frozen=True)
class FlowTrainer:
    """One FlowGRPO trainer as its smoke run drives it. upstream_file: the trainer in the checkout;
    module_name: the name it is imported under; build_model(folder): writes the tiny pipeline folder
    upstream's ``from_pretrained(config.pretrained.model)`` loads; model_env: the variable naming a
    folder shared by several runs (tests); overrides(sizes): the trainer's own config keys on top of
    ``config_overrides``; starts_wandb: False where the trainer calls ``wandb.log`` without
    ``wandb.init`` (GRPO-Guard: its init is commented out), so the smoke starts a disabled run."""

    upstream_file: str
    module_name: str
    build_model: Callable[[Path], object]
    model_env: str = "OTCA_TINY_SD3_DIR"
    model_folder: str = "tiny_sd3"
    overrides: Callable[[Sizes], dict] = lambda sizes: {}
    starts_wandb: bool = True


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


def write_config(out_dir: Path, upstream_dir: Path, sizes: Sizes, model: Path, extra: dict | None = None) -> str:
    """The ``--config`` value: a config file in ``out_dir`` and its JSON settings (atomic writes:
    several processes write the same files)."""
    dataset = out_dir / "dataset"
    dataset.mkdir(parents=True, exist_ok=True)
    atomic_write_text(dataset / "train.txt", "\n".join(PROMPTS) + "\n")
    atomic_write_text(dataset / "test.txt", "\n".join(PROMPTS[:2]) + "\n")
    settings = out_dir / "smoke_config.json"
    overrides = {**config_overrides(sizes, dataset, model), **(extra or {})}
    atomic_write_text(settings, json.dumps({"upstream_dir": str(upstream_dir), "epochs": sizes.steps,
                                            "overrides": overrides}, indent=2))
    config_file = out_dir / "smoke_config.py"
    atomic_write_text(config_file, "from otca_patch.smoke.flowgrpo_config import get_config  # noqa: F401\n")
    return f"{config_file}:{settings}"


def load_upstream(upstream_dir: Path, config: OtcaConfig, trainer: FlowTrainer):
    """The upstream module (not run as __main__): untouched for vanilla, rewritten by the layer otherwise."""
    path = upstream_dir / trainer.upstream_file
    if not path.is_file():
        raise SystemExit(f"smoke: {path} does not exist; pass a FlowGRPO checkout that has it")
    sys.path.insert(0, str(upstream_dir))  # `import flow_grpo...`, as when run from the checkout
    if config.active:
        from ..hooks.select import spec_choice_for_script
        from ..launch.runner import load_patched_module

        from . import meter

        module = load_patched_module(str(path), spec_choice_for_script(path).spec, config, trainer.module_name)
        meter.install(module, Path.cwd())  # the run folder (OTCA_SMOKE_METER=1 only)
        return module
    spec = importlib.util.spec_from_file_location(trainer.module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
        digest = hashlib.sha256()
        for name, parameter in self.model.named_parameters():
            if parameter.requires_grad:
                digest.update(name.encode())
                digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()


def run(trainer: FlowTrainer, upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes,
        reward_root: Path, probe=None) -> dict:
    missing = [name for name in UPSTREAM_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"smoke: FlowGRPO's trainer imports {', '.join(missing)}, which this environment lacks: "
                         f"pip install 'otca-patch[flowgrpo]'")
    accelerate_as_on_gpus()
    os.environ.setdefault("WANDB_MODE", "disabled")
    upstream_dir, out_dir = upstream_dir.resolve(), out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    folder = Path(os.environ.get(trainer.model_env) or reward_root.parent / trainer.model_folder).resolve()
    model = tiny_model(folder, trainer.build_model)
    config_flag = write_config(out_dir, upstream_dir, sizes, model, trainer.overrides(sizes))
    os.chdir(out_dir)  # upstream's logs/ go here
    module = load_upstream(upstream_dir, config, trainer)
    recording = TrainingProbe(module)
    recorder = probe(module) if probe is not None else None  # tests: --probe FILE.py:NAME

    from absl import app

    if not trainer.starts_wandb:
        import wandb

        wandb.init(mode="disabled")
    try:
        app.run(module.main, argv=[str(upstream_dir / trainer.upstream_file), f"--config={config_flag}"])
    except SystemExit as stop:  # the config's epoch stop; anything else is a failure
        if stop.code not in (0, None):
            raise
    import torch.distributed as dist

    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    result = {"otca": config.otca, "observe": config.otca_observe, "mode": config.otca_mode if config.active else None,
              "world_size": world_size, "sizes": asdict(sizes), "losses": recording.losses,
              "grad_norms": recording.grad_norms, "weights_digest": recording.weights_digest()}
    (out_dir / f"smoke_rank{rank}.json").write_text(json.dumps(result, indent=2))
    if recorder is not None:
        recorder.save(out_dir / f"probe_rank{rank}.pt")
    if rank == 0:
        (out_dir / "smoke.json").write_text(json.dumps(result, indent=2))
        print(f"smoke: {sizes.steps} epochs, {len(recording.losses)} backward passes, losses {recording.losses}", flush=True)
    return result
