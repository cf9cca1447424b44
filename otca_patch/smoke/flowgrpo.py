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

A trainer's spec says what it adds, in its ``[target.smoke]`` table (``harness = "flowgrpo"``): the
tiny ``model`` it loads (``MODELS``), its ``sizes`` and config ``overrides``, the fewest ``processes``
and the ``launcher`` its ``main`` runs under, ``starts_wandb``; ``target_smoke`` builds its
``FlowTrainer`` from that table and the spec's ``file``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import torch

from ..config import OtcaConfig
from ..files import atomic_write_text
from ..hooks.spec import Smoke, load_specs
from ..stand_ins import qwen_transformers
from ..stand_ins.cpu import accelerate_as_on_gpus, decode_float_ids_as_transformers_4, smoke_device
from ..stand_ins.flowgrpo import cpu_fsdp, stand_in_paddleocr
from ..tiny_models.datasets import built_once, write_edit_dataset, write_ocr_prompts, write_prompt_lists
from ..tiny_models.flux import build_tiny_flux, build_tiny_kontext
from ..tiny_models.qwenimage import build_tiny_qwenimage, build_tiny_qwenimage_edit
from ..tiny_models.sd3 import build_tiny_sd3
from ..tiny_models.wan import build_tiny_wan
from .harness import SmokeSizes, filled, load_upstream, sizes_type

#: Wan2.1's main trains from epoch 2 (its first two epochs only draw prompts: ``if epoch < 2: continue``)
WAN_UNTRAINED_EPOCHS = 2
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
class TinyModel:
    """A tiny pipeline the family's trainers load, and what a trainer loading it needs on the CPU:
    ``build(folder)``, ``env`` (a variable naming a pipeline folder shared by several runs, for
    tests), ``sizes`` and ``base_overrides`` (its trainers' size flags and config keys),
    ``write_dataset(folder)``, ``probe`` (a probe class), ``prepare(module)`` (CPU stand-ins the
    loaded module needs), ``before_imports()``, ``extra_packages`` and ``untrained_epochs`` (epochs
    upstream's main only draws prompts in: the config's epoch stop comes that much later)."""

    build: Callable[[Path], Path]
    env: str
    sizes: type = FlowSizes
    base_overrides: Callable = common_overrides
    write_dataset: Callable[[Path], None] = write_prompt_lists
    probe: type = TrainingProbe
    prepare: Callable = lambda module: None
    before_imports: Callable = lambda: None
    extra_packages: tuple = ()
    untrained_epochs: int = 0


#: Qwen-Image's trainers: torch FSDP without accelerate, Qwen2.5-VL (a newer transformers, when one is installed)
_QWEN_FSDP = {"probe": FsdpProbe, "prepare": cpu_fsdp, "before_imports": qwen_transformers.use}
#: the tiny pipelines, by the name a spec's ``[target.smoke] model`` gives
MODELS = {
    "sd3": TinyModel(build_tiny_sd3, "OTCA_TINY_SD3_DIR", sizes=Sizes, base_overrides=config_overrides),
    "flux": TinyModel(build_tiny_flux, "OTCA_TINY_FLUX_DIR"),
    "flux_kontext": TinyModel(build_tiny_kontext, "OTCA_TINY_FLUX_KONTEXT_DIR", write_dataset=write_edit_dataset),
    "qwenimage": TinyModel(build_tiny_qwenimage, "OTCA_TINY_QWENIMAGE_DIR", **_QWEN_FSDP),
    "qwenimage_edit": TinyModel(build_tiny_qwenimage_edit, "OTCA_TINY_QWENIMAGE_EDIT_DIR",
                                write_dataset=write_edit_dataset, **_QWEN_FSDP),
    "wan": TinyModel(build_tiny_wan, "OTCA_TINY_WAN_DIR", write_dataset=write_ocr_prompts,
                     prepare=stand_in_paddleocr, extra_packages=("imageio", "Levenshtein"),
                     untrained_epochs=WAN_UNTRAINED_EPOCHS),
}
LAUNCHES = {"accelerate": "as upstream launches it: accelerate launch --num_processes {n} --multi_gpu "
                          "-m otca_patch.smoke ... (its main does not run on fewer)",
            "torchrun": "under torchrun, as upstream launches it: torchrun --nproc_per_node 2 -m otca_patch.smoke ... "
                        "(it starts its own process group)"}


@dataclass(frozen=True)
class FlowTrainer:
    """One FlowGRPO trainer's smoke: ``smoke`` (its spec's ``[target.smoke]``: the upstream ``file``,
    the tiny ``model``, its config ``overrides`` over the model's base ones with ``"{size}"`` values
    filled in, the ``processes`` and ``launcher`` upstream's ``main`` needs, ``starts_wandb``: False
    where the trainer calls ``wandb.log`` without ``wandb.init``, as GRPO-Guard, whose init is
    commented out, and the smoke starts a disabled run) and ``sizes`` (its size flags)."""

    smoke: Smoke
    sizes: type

    @property
    def upstream_file(self) -> str:
        return self.smoke.file

    @property
    def model(self) -> TinyModel:
        return MODELS[self.smoke.model]

    def check_launch(self) -> None:
        """A launch upstream's ``main`` cannot run in is refused before anything loads, saying how to launch."""
        processes, launcher = self.smoke.processes, self.smoke.launcher
        if int(os.environ.get("WORLD_SIZE", "1")) < processes or (launcher == "torchrun" and "RANK" not in os.environ):
            on = f"on {processes} or more processes, " if launcher == "accelerate" else ""
            raise SystemExit(f"smoke: {self.upstream_file} must be launched {on}"
                             f"{LAUNCHES[launcher].format(n=max(processes, 2))}")

    def config_keys(self, sizes: FlowSizes, dataset: Path, model: Path) -> dict:
        """Dotted config keys -> values over upstream's config: the model's base keys, then the trainer's."""
        return {**self.model.base_overrides(sizes, dataset, model), **filled(self.smoke.overrides, sizes)}

    def write_config(self, out_dir: Path, upstream_dir: Path, sizes: FlowSizes, model: Path) -> str:
        stop = replace(sizes, steps=sizes.steps + self.model.untrained_epochs)
        return write_config(out_dir, upstream_dir, stop, model, filled(self.smoke.overrides, sizes),
                            self.model.write_dataset, self.model.base_overrides)

    def tiny_pipeline(self, reward_root: Path) -> Path:
        default = reward_root.parent / f"tiny_{self.smoke.model}"
        return built_once(Path(os.environ.get(self.model.env) or default).resolve(), self.model.build)

    def run(self, upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: FlowSizes, reward_root: Path,
            probe=None) -> dict:
        missing = [name for name in UPSTREAM_EXTRA + self.model.extra_packages if importlib.util.find_spec(name) is None]
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
        module = load_upstream(upstream_dir, self.upstream_file, config, f"flowgrpo_{Path(self.upstream_file).stem}")
        self.model.prepare(module)
        recording = self.model.probe(module)
        test_probe = probe(module) if probe is not None else None  # --probe: a test's recorder

        from absl import app

        if not self.smoke.starts_wandb:
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


def trainer(name: str, smoke: Smoke) -> FlowTrainer:
    """Target ``name``'s trainer from its spec's ``[target.smoke]`` table;
    a model or a size its table names that does not exist: one line saying so."""
    where = f"target {name}: [target.smoke]"
    if smoke.model not in MODELS:
        raise ValueError(f"{where} model must be one of {', '.join(MODELS)}, got {smoke.model!r}")
    return FlowTrainer(smoke, sizes_type(where, MODELS[smoke.model].sizes, smoke.sizes, smoke.overrides))


def target_smoke(name: str, smoke: Smoke) -> SimpleNamespace:
    """What the smoke command runs for target ``name``: its ``Sizes``, ``run`` and ``before_imports``."""
    flow = trainer(name, smoke)
    return SimpleNamespace(Sizes=flow.sizes, run=flow.run, before_imports=flow.model.before_imports)


def trainer_named(name: str) -> FlowTrainer:
    """The trainer of the shipped spec ``name`` (the launch rehearsal runs it as upstream launches it)."""
    return trainer(name, next(spec.smoke for spec in load_specs() if spec.name == name))
