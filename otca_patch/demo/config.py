"""The demo's one configuration object: every field is a command-line flag (``--grpo_steps`` for
``grpo_steps``, made by the project's one flag generator ``otca_patch.flags``), so the flags, their
defaults and their checks live in one place."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from otca_patch.flags import flag



@dataclass
class DemoConfig:
    """Sizes and hyper-parameters of the embedded demo (defaults: a few minutes on 2 CPU cores).

    The GRPO defaults follow DanceGRPO's FLUX script where the paper fixes them (eta 0.3, shift 3,
    advantage clip 5, the same initial noise within a group), and the paper's appendix A.5 where
    it differs: PPO ratio clip 1e-4 and every step trained (no timestep fraction). The learning
    rate is scaled to a 70k-parameter model: the value at which single-objective GRPO improves its
    objective steadily (``tests/demo/test_demo_learning.py``); one optimizer step per iteration, as one
    DanceGRPO rank with gradient accumulation over its rollouts.
    """

    out: str = flag("output folder (report, plots, cached base model)", "runs/demo")
    modes: str = flag("comma-separated credit variants to compare (a credit mode, as --otca_mode takes it, or a "
                       "control of docs/demo.md); the first one is the reference", "multi_grpo,otca")
    seeds: str = flag("comma-separated GRPO seeds (prompts, initial and SDE noise; the same for every variant, "
                       "so runs are paired by seed)", "0,1,2,3")
    regime: str = flag("task regime: conflicting (palette, shape, edges: the objectives disagree on many samples) or "
                        "agreeing (palette, shape, fidelity: they mostly agree) or hacking (palette, shape, vividness: vividness "
                        "can be raised past the clean render at the others' cost); both (conflicting and agreeing) or all "
                        "(ablate only) runs each in turn (docs/demo.md)", "conflicting",
                        choices=("conflicting", "agreeing", "hacking", "both", "all"))
    # --- base model (cached under the base cache folder by a hash of these fields)
    base_seed: int = flag("seed of the base model's initialisation and pre-training", 0)
    base_cache: str = flag("folder holding the cached base model ('' = the output folder)", "")
    image_size: int = flag("image side in pixels (even)", 12)
    heads: int = flag("attention heads of the tiny FLUX transformer", 2)
    head_dim: int = flag("attention head dimension (a multiple of 4)", 16)
    layers: int = flag("double-stream (joint) blocks", 1)
    single_layers: int = flag("single-stream blocks", 1)
    text_dim: int = flag("width of the prompt-word embeddings (joint and pooled projection dim)", 32)
    pretrain_steps: int = flag("flow-matching steps of the base model", 800)
    pretrain_batch: int = flag("images per flow-matching step", 64)
    pretrain_lr: float = flag("AdamW learning rate of pre-training", 3e-3)
    corrupt_prob: float = flag("probability of each corruption (colour jitter, blur, misplacement) in the "
                                "pre-training mixture", 0.5)
    # --- GRPO (DanceGRPO's FLUX trainer)
    grpo_steps: int = flag("GRPO iterations (rollout + update) per run", 60)
    prompts_per_step: int = flag("prompts per iteration", 4)
    group_size: int = flag("samples per prompt (DanceGRPO's num_generations)", 8)
    sampling_steps: int = flag("SDE sampling steps T", 8)
    eta: float = flag("SDE noise level", 0.3)
    shift: float = flag("time shift of the sigma schedule, shift*s/(1+(shift-1)*s)", 3.0)
    init_same_noise: bool = flag("share the initial noise within each group (DanceGRPO --init_same_noise)", True)
    timestep_fraction: float = flag("fraction of the T-1 trainable steps each sample trains, in random order "
                                     "(the paper: 1, no timestep fraction)", 1.0)
    clip_range: float = flag("PPO ratio clip range (the paper's 1e-4)", 1e-4)
    adv_clip_max: float = flag("advantage clipping bound", 5.0)
    learning_rate: float = flag("AdamW learning rate of GRPO", 1e-4)
    weight_decay: float = flag("AdamW weight decay of GRPO", 1e-4)
    max_grad_norm: float = flag("gradient-norm clip", 1.0)
    micro_batch: int = flag("samples per forward pass in the update (upstream: 1; the gradient is the same)", 32)
    grad_accum: int = flag("micro-batches per optimizer step", 1)
    conflict_diagnostic: bool = flag("per update, each objective's own gradient and its cosine with the applied "
                                      "update (one batched backward pass for the K+1 gradients)", True)
    # --- evaluation
    eval_every: int = flag("evaluate every this many iterations", 10)
    eval_prompts: int = flag("fixed evaluation prompts", 32)
    eval_samples_per_prompt: int = flag("samples per evaluation prompt", 2)
    eval_seed: int = flag("seed of the evaluation prompts and noise (the same for every variant and seed)", 1234)
    threshold: float = flag("practical threshold of a difference, in base-model evaluation-sample standard deviations "
                            "of each objective: a difference whose 95%% interval lies within it is called negligible", 0.1)
    # --- run
    threads: int = flag("torch CPU threads per process (0 = torch's default); tiny matrices gain nothing from "
                         "more, and numbers are reproducible for a fixed thread count", 1)
    workers: int = flag("processes running GRPO runs side by side (each with --threads threads); 1 = inline", 2)
    quiet: bool = flag("no progress bars", False)
    resume: bool = flag("keep each finished GRPO run under <out>/finished_runs/ and reuse the runs whose variant, "
                        "seed and training fields match (an interrupted run continues where it stopped)", False)

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
        _require("threshold", self.threshold >= 0, "must be >= 0 (0: every difference that excludes 0 counts)")
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

    @property
    def task_regime(self):
        """The one ``regimes.Regime`` of this run (``--regime both`` names none: split it first)."""
        from .regimes import REGIMES

        _require("regime", self.regime in REGIMES, f"{self.regime!r} names several regimes; run one at a time "
                 "(otca-patch ablate --regime both or all does)")
        return REGIMES[self.regime]

    @property
    def objectives(self) -> tuple:
        return self.task_regime.objectives

    def base_model_key(self) -> str:
        """Hash of every field the base model depends on (its cache name): one base model per regime."""
        from .data import CORRUPTIONS

        keys = ("base_seed", "image_size", "heads", "head_dim", "layers", "single_layers", "text_dim",
                "pretrain_steps", "pretrain_batch", "pretrain_lr", "corrupt_prob")
        extra = {}
        if self.task_regime.corruptions != CORRUPTIONS:  # the default regime keeps its earlier cache name
            extra["corruptions"] = list(self.task_regime.corruptions)
        payload = json.dumps({k: getattr(self, k) for k in keys} | {"format": BASE_MODEL_FORMAT} | extra, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        return asdict(self)


#: Bumped whenever the base model's data, architecture or training changes meaning.
BASE_MODEL_FORMAT = 2


def _require(name: str, ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"--{name}: {message}")


#: Seconds-scale sizes for tests and smoke runs (the machinery, not a meaningful experiment).
TINY_SIZES = dict(
    image_size=8, heads=1, head_dim=8, layers=1, single_layers=0, text_dim=8, pretrain_steps=4, pretrain_batch=8,
    grpo_steps=2, prompts_per_step=2, group_size=2, sampling_steps=3, micro_batch=2, grad_accum=1, eval_every=1,
    eval_prompts=2, eval_samples_per_prompt=1, workers=1, quiet=True, seeds="0",
)


def tiny_config(**overrides) -> DemoConfig:
    """A ``DemoConfig`` with ``TINY_SIZES`` (overridable)."""
    return DemoConfig(**{**TINY_SIZES, **overrides})
