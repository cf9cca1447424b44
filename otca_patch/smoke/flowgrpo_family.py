"""The shared base of the smoke runs of FlowGRPO's newer trainers (9745241: FLUX, FLUX-Fast,
Qwen-Image, ...): upstream's real ``main()`` through absl, on the CPU, with a tiny pipeline folder
the first local process writes to disk and upstream's own ``from_pretrained`` loads.

A trainer's smoke module defines ``Sizes`` and a ``TRAINER = FlowTrainer(...)`` (its upstream file,
how to build its tiny pipeline, its config keys over the common ones) and ``run = TRAINER.run``.
Launch it as upstream does (accelerate or torchrun) with ``-m otca_patch.smoke``. What is not
upstream's: the tiny pipeline folder, the dataset files, the config's epoch stop
(``flowgrpo_config``), and the probe that records each loss, each clipped gradient norm and a
digest of the trained weights (``flowgrpo_sd3.TrainingProbe``, or ``FsdpProbe`` for trainers
without accelerate).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..config import OtcaConfig
from .flowgrpo_sd3 import PROMPTS, UPSTREAM_EXTRA, TrainingProbe, _write_once, config_overrides
from .flowgrpo_sd3 import Sizes as Sd3Sizes
from .environment import accelerate_as_on_gpus, decode_float_ids_as_transformers_4
from .flowgrpo import tiny_model
from .harness import load_upstream


@dataclass
class FlowSizes(Sd3Sizes):
    """Sizes of one smoke run of a FlowGRPO trainer: the SD3 smoke's, at 32 pixels (FLUX and
    Qwen-Image latents are 1/8 of it, packed 2x2)."""

    resolution: int = 32


def common_overrides(sizes: FlowSizes, dataset: Path, model: Path) -> dict:
    """Dotted config keys every FlowGRPO trainer reads, over upstream's config/base.py: the SD3
    smoke's, with FLUX's guidance and no EMA (9745241's base config has ``train.ema``)."""
    return {**config_overrides(sizes, dataset, model), "sample.guidance_scale": 3.5,
            "sample.eval_guidance_scale": 3.5, "train.ema": False}


#: FLUX-family loops read ``transformer.module`` (DDP's wrapper, which accelerate adds on 2+ processes only)
ACCELERATE_DDP = {"min_processes": 2, "launch": "on 2 or more processes, as upstream launches it: accelerate launch "
                  "--num_processes 2 --multi_gpu -m otca_patch.smoke ... (its loop reads DDP's transformer.module)"}


def write_prompt_lists(folder: Path) -> None:
    """``train.txt`` / ``test.txt``: the prompt lists of upstream's ``general_ocr`` dataset."""
    _write_once(folder / "train.txt", "\n".join(PROMPTS) + "\n")
    _write_once(folder / "test.txt", "\n".join(PROMPTS[:2]) + "\n")


class FsdpProbe:
    """The probe of a trainer without accelerate (Qwen-Image's FSDP loop): every ``loss.backward()``
    and every ``torch.nn.utils.clip_grad_norm_`` of this process, and the trained weights at the end."""

    def __init__(self, module):
        self.losses, self.grad_norms, self.model = [], [], None
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
        self.parameters = []

    def weights_digest(self) -> str:
        digest = hashlib.sha256()
        for parameter in self.parameters:
            if parameter.requires_grad:
                digest.update(parameter.detach().cpu().float().contiguous().numpy().tobytes())
        return digest.hexdigest()


@dataclass(frozen=True)
class FlowTrainer:
    """One FlowGRPO trainer's smoke: ``upstream_file`` (in the checkout), ``build_model(folder)`` (its
    tiny pipeline), ``model_env`` (a variable naming a shared pipeline folder, for tests),
    ``overrides(sizes)`` (its config keys over ``common_overrides``), ``probe`` (a probe class),
    ``write_dataset(folder)`` (its dataset files; default: upstream's ``general_ocr`` prompt lists)."""

    upstream_file: str
    module_name: str
    build_model: Callable[[Path], Path]
    model_env: str
    overrides: Callable[[FlowSizes], dict] = lambda sizes: {}
    probe: type = TrainingProbe
    extra_packages: tuple = field(default=())
    write_dataset: Callable[[Path], None] = write_prompt_lists
    prepare: Callable = lambda module: None  # CPU stand-ins the trainer's module needs (after loading)
    min_processes: int = 1  # fewer processes cannot run upstream's main
    needs_torchrun: bool = False  # upstream's main starts its own process group from torchrun's variables
    launch: str = ""  # how to launch it, for the error

    def check_launch(self) -> None:
        """A launch upstream's ``main`` cannot run in is refused before anything loads, saying how to launch."""
        if int(os.environ.get("WORLD_SIZE", "1")) < self.min_processes or (self.needs_torchrun and "RANK" not in os.environ):
            raise SystemExit(f"smoke: {self.upstream_file} must be launched {self.launch}")

    def write_config(self, out_dir: Path, upstream_dir: Path, sizes: FlowSizes, model: Path) -> str:
        """The ``--config`` value: a config file in ``out_dir`` and its JSON settings."""
        dataset = out_dir / "dataset"
        dataset.mkdir(parents=True, exist_ok=True)
        self.write_dataset(dataset)
        overrides = {**common_overrides(sizes, dataset, model), **self.overrides(sizes)}
        settings = out_dir / "smoke_config.json"
        _write_once(settings, json.dumps({"upstream_dir": str(upstream_dir), "epochs": sizes.steps,
                                          "overrides": overrides}, indent=2))
        config_file = out_dir / "smoke_config.py"
        _write_once(config_file, "from otca_patch.smoke.flowgrpo_config import get_config  # noqa: F401\n")
        return f"{config_file}:{settings}"

    def model_folder(self, reward_root: Path) -> Path:
        default = reward_root.parent / f"tiny_{self.module_name}"
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
        model = self.model_folder(reward_root)
        config_flag = self.write_config(out_dir, upstream_dir, sizes, model)
        os.chdir(out_dir)  # upstream's logs/ and checkpoints go here
        module = load_upstream(upstream_dir, self.upstream_file, config, f"flowgrpo_{self.module_name}")
        self.prepare(module)
        recording = self.probe(module)
        test_probe = probe(module) if probe is not None else None  # --probe: a test's recorder

        from absl import app

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
