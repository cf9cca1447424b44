"""The demo's one configuration object: every field is a command-line flag (``--grpo_steps`` for
``grpo_steps``, the project's one flag style), so the flags, their defaults and their checks live in
one place."""
from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Optional



def _flag(help_text: str, default, **extra):
    return field(default=default, metadata={"help": help_text, **extra})


@dataclass
class DemoConfig:
    """Sizes and hyper-parameters of the embedded demo (defaults: a few minutes on 2 CPU cores).

    The GRPO defaults follow DanceGRPO's FLUX script where the paper fixes them (eta 0.3, shift 3,
    advantage clip 5, the same initial noise within a group), and the paper's appendix A.5 where
    it differs: PPO ratio clip 1e-4 and every step trained (no timestep fraction). The learning
    rate is scaled to a 70k-parameter model: the value at which single-objective GRPO improves its
    objective steadily (``tests/test_demo_learning.py``); one optimizer step per iteration, as one
    DanceGRPO rank with gradient accumulation over its rollouts.
    """

    out: str = _flag("output folder (report, plots, cached base model)", "runs/demo")
    modes: str = _flag("comma-separated credit variants to compare (a mode of otca_patch.credit or a control of "
                       "otca_patch.demo.variants); the first one is the reference", "multi_grpo,otca")
    seeds: str = _flag("comma-separated GRPO seeds (prompts, initial and SDE noise; the same for every variant, "
                       "so runs are paired by seed)", "0,1,2,3")
    # --- base model (cached under the base cache folder by a hash of these fields)
    base_seed: int = _flag("seed of the base model's initialisation and pre-training", 0)
    base_cache: str = _flag("folder holding the cached base model ('' = the output folder)", "")
    image_size: int = _flag("image side in pixels (even)", 12)
    heads: int = _flag("attention heads of the tiny FLUX transformer", 2)
    head_dim: int = _flag("attention head dimension (a multiple of 4)", 16)
    layers: int = _flag("double-stream (joint) blocks", 1)
    single_layers: int = _flag("single-stream blocks", 1)
    text_dim: int = _flag("width of the prompt-word embeddings (joint and pooled projection dim)", 32)
    pretrain_steps: int = _flag("flow-matching steps of the base model", 800)
    pretrain_batch: int = _flag("images per flow-matching step", 64)
    pretrain_lr: float = _flag("AdamW learning rate of pre-training", 3e-3)
    corrupt_prob: float = _flag("probability of each corruption (colour jitter, blur, misplacement) in the "
                                "pre-training mixture", 0.5)
    # --- GRPO (DanceGRPO's FLUX trainer)
    grpo_steps: int = _flag("GRPO iterations (rollout + update) per run", 60)
    prompts_per_step: int = _flag("prompts per iteration", 4)
    group_size: int = _flag("samples per prompt (DanceGRPO's num_generations)", 8)
    sampling_steps: int = _flag("SDE sampling steps T", 8)
    eta: float = _flag("SDE noise level", 0.3)
    shift: float = _flag("time shift of the sigma schedule, shift*s/(1+(shift-1)*s)", 3.0)
    init_same_noise: bool = _flag("share the initial noise within each group (DanceGRPO --init_same_noise)", True)
    timestep_fraction: float = _flag("fraction of the T-1 trainable steps each sample trains, in random order "
                                     "(the paper: 1, no timestep fraction)", 1.0)
    clip_range: float = _flag("PPO ratio clip range (the paper's 1e-4)", 1e-4)
    adv_clip_max: float = _flag("advantage clipping bound", 5.0)
    learning_rate: float = _flag("AdamW learning rate of GRPO", 1e-4)
    weight_decay: float = _flag("AdamW weight decay of GRPO", 1e-4)
    max_grad_norm: float = _flag("gradient-norm clip", 1.0)
    micro_batch: int = _flag("samples per forward pass in the update (upstream: 1; the gradient is the same)", 32)
    grad_accum: int = _flag("micro-batches per optimizer step", 1)
    # --- evaluation
    eval_every: int = _flag("evaluate every this many iterations", 10)
    eval_prompts: int = _flag("fixed evaluation prompts", 32)
    eval_samples_per_prompt: int = _flag("samples per evaluation prompt", 2)
    eval_seed: int = _flag("seed of the evaluation prompts and noise (the same for every variant and seed)", 1234)
    # --- run
    threads: int = _flag("torch CPU threads per process (0 = torch's default); tiny matrices gain nothing from "
                         "more, and numbers are reproducible for a fixed thread count", 1)
    workers: int = _flag("processes running GRPO runs side by side (each with --threads threads); 1 = inline", 2)
    quiet: bool = _flag("no progress bars", False)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ``ValueError`` naming the flag for any value that cannot work."""
        positive = ["image_size", "heads", "head_dim", "text_dim", "pretrain_batch", "grpo_steps",
                    "prompts_per_step", "sampling_steps", "micro_batch", "grad_accum", "eval_every",
                    "eval_prompts", "eval_samples_per_prompt", "workers"]
        for name in positive:
            _require(name, getattr(self, name) >= 1, "must be >= 1")
        _require("corrupt_prob", 0 <= self.corrupt_prob <= 1, "must lie in [0, 1]")
        self.seed_list()  # checks the seeds
        for name in ("layers", "single_layers", "pretrain_steps", "threads"):
            _require(name, getattr(self, name) >= 0, "must be >= 0")
        _require("layers", self.layers + self.single_layers >= 1, "the transformer needs at least one block")
        _require("image_size", self.image_size % 2 == 0, "must be even (2x2 pixel patches)")
        _require("head_dim", self.head_dim % 4 == 0 and self.head_dim >= 8, "must be a multiple of 4 and >= 8 (rotary axes)")
        _require("group_size", self.group_size >= 2, "must be >= 2 (group advantages need two samples)")
        _require("sampling_steps", self.sampling_steps >= 2, "must be >= 2 (the last step is not trained)")
        _require("eta", 0 < self.eta, "must be > 0 (the SDE policy needs noise for its log-probability)")
        _require("shift", self.shift > 0, "must be > 0")
        _require("timestep_fraction", 0 < self.timestep_fraction <= 1, "must lie in (0, 1]")
        _require("timestep_fraction", int((self.sampling_steps - 1) * self.timestep_fraction) >= 1,
                 f"trains no step with sampling_steps={self.sampling_steps}; raise one of them")
        for name in ("clip_range", "adv_clip_max", "learning_rate", "pretrain_lr", "max_grad_norm"):
            _require(name, getattr(self, name) > 0, "must be > 0")
        _require("weight_decay", self.weight_decay >= 0, "must be >= 0")
        batch = self.prompts_per_step * self.group_size
        _require("micro_batch", batch % (self.micro_batch * self.grad_accum) == 0,
                 f"micro_batch*grad_accum = {self.micro_batch * self.grad_accum} must divide "
                 f"prompts_per_step*group_size = {batch}")
        self.mode_list()  # checks the names

    def mode_list(self) -> list[str]:
        """The credit variants to run (checked against ``variants.VARIANTS``)."""
        from .variants import VARIANTS

        names = [m.strip() for m in self.modes.split(",") if m.strip()]
        _require("modes", bool(names), "name at least one credit mode")
        unknown = [m for m in names if m not in VARIANTS]
        _require("modes", not unknown, f"unknown credit mode {unknown[0]!r} (valid: {', '.join(VARIANTS)})" if unknown else "")
        _require("modes", len(set(names)) == len(names), "a mode is named twice")
        return names

    def seed_list(self) -> list[int]:
        try:
            seeds = [int(s) for s in self.seeds.split(",") if s.strip()]
        except ValueError:
            raise ValueError(f"--seeds: expected comma-separated integers, got {self.seeds!r}") from None
        _require("seeds", bool(seeds), "name at least one seed")
        _require("seeds", len(set(seeds)) == len(seeds), f"a seed is named twice in {self.seeds!r}")
        return seeds

    # ------------------------------------------------------------------ derived
    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def trained_steps(self) -> int:
        """Steps each sample trains per iteration: ``int((T - 1) * timestep_fraction)``."""
        return int((self.sampling_steps - 1) * self.timestep_fraction)

    def base_model_key(self) -> str:
        """Hash of every field the base model depends on (its cache name)."""
        keys = ("base_seed", "image_size", "heads", "head_dim", "layers", "single_layers", "text_dim",
                "pretrain_steps", "pretrain_batch", "pretrain_lr", "corrupt_prob")
        payload = json.dumps({k: getattr(self, k) for k in keys} | {"format": BASE_MODEL_FORMAT}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        return asdict(self)


#: Bumped whenever the base model's data, architecture or training changes meaning.
BASE_MODEL_FORMAT = 2


def _require(name: str, ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"--{name}: {message}")


# ---------------------------------------------------------------------- argparse from dataclasses

def add_dataclass_flags(parser: argparse.ArgumentParser, cls, skip: tuple = (), defaults: Optional[dict] = None) -> None:
    """One ``--field_name`` flag per dataclass field (a bool is a switch ``--x``, with ``--no_x``
    when it defaults to true): the project's flag style."""
    defaults = defaults or {}
    for f in fields(cls):
        if f.name in skip:
            continue
        default = defaults.get(f.name, f.default if f.default is not MISSING else None)
        help_text = f"{f.metadata.get('help', '')} (default: {default})"
        if isinstance(default, bool):
            parser.add_argument(f"--{f.name}", dest=f.name, default=default, action="store_true", help=help_text)
            if default:
                parser.add_argument(f"--no_{f.name}", dest=f.name, action="store_false", help=f"turn --{f.name} off")
        else:
            parser.add_argument(f"--{f.name}", dest=f.name, default=default, type=type(default), help=help_text)


def dataclass_from_args(cls, args: argparse.Namespace, **overrides):
    values = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
    values.update(overrides)
    return cls(**values)


def config_flags(config, cls=None) -> list:
    """The flags that parse back into ``config`` (fields that differ from the defaults)."""
    cls = cls or type(config)
    default, argv = cls(), []
    for f in fields(cls):
        value = getattr(config, f.name)
        if value == getattr(default, f.name):
            continue
        if isinstance(value, bool):
            argv.append(f"--{f.name}" if value else f"--no_{f.name}")
        else:
            argv += [f"--{f.name}", str(value)]
    return argv


#: Seconds-scale sizes for tests and smoke runs (the machinery, not a meaningful experiment).
TINY_SIZES = dict(
    image_size=8, heads=1, head_dim=8, layers=1, single_layers=0, text_dim=8, pretrain_steps=4, pretrain_batch=8,
    grpo_steps=2, prompts_per_step=2, group_size=2, sampling_steps=3, micro_batch=2, grad_accum=1, eval_every=1,
    eval_prompts=2, eval_samples_per_prompt=1, workers=1, quiet=True, seeds="0",
)


def tiny_config(**overrides) -> DemoConfig:
    """A ``DemoConfig`` with ``TINY_SIZES`` (overridable)."""
    return DemoConfig(**{**TINY_SIZES, **overrides})
