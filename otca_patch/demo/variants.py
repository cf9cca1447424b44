"""The credit variants the demo can train: the six modes of ``otca_patch.credit`` and the controls
of the ablation (spec sections 1.6, 3.6, 3.7), each a mode plus ``CreditConfig`` options.

A control answers one question about a claim:
- ``tcd_batch``: TCD with ``weight_scope="batch"`` (one per-step schedule for every sample): does
  TCD credit individual trajectories, or only learn a timestep schedule?
- ``multi_grpo_moca_rms``: ``multi_grpo`` rescaled, per batch, to the RMS of MOCA's combined
  advantage on the same batch: is MOCA's effect more than a smaller step?
- ``moca_beta0``, ``moca_centred``, ``moca_group``: MOCA without the exploration bias, with the
  bias centred on the group's mean path, and with one MGDA mixture per group.

The paper's own baseline and the options that test OTCA's two gap-fills (docs/credit.md 2.1, 3.8):
- ``sum_raw``: DanceGRPO's single scalar, the *raw* rewards summed (each objective times its
  regime's raw scale, ``regimes.Regime.raw_scales``: one objective 20x the others, as Aesthetic
  against CLIP-T in the paper), normalised per group; ``sum_window``: the same raw rewards, each first
  rescaled to unit std over a running window (``reward_scale="window"``, App. A.5's rescaling);
- ``otca_window``: OTCA with ``reward_scale="window"`` (the window's std instead of each group's);
- ``otca_maxadv``: OTCA with ``explore_scale="max_advantage"`` (the exploration bias scaled by the
  sample's largest objective advantage, not an absolute 0.5);
- ``multi_grpo_timed``, ``otca_timed``: the option ``objective_timing="probe"`` (docs/credit.md 9.3)
  on Multi-GRPO and OTCA: each objective's share of the advantage spread over the steps that decide it.

The peers' answers (docs/credit.md section 8; comparison methods, not OTCA):
- ``coca``: CoCA's step credit (the credit engine's mode ``coca``, fed the predicted clean samples);
- ``tempflow``: TempFlow-GRPO's noise-aware step weights (mode ``tempflow``, fed the SDE's step std);
- ``marble``: MARBLE, a gradient-space method: K per-objective policy gradients per update,
  combined by the min-norm rule over unit-normed gradients with an EMA of the weights
  (``gradients.MarbleCombiner``); a demo variant only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


from otca_patch.credit import MODES, CreditConfig, modes


@dataclass(frozen=True)
class Variant:
    name: str
    mode: str
    options: dict = field(default_factory=dict)  # extra CreditConfig fields
    rescale_to: str = ""  # a mode whose combined-advantage RMS this variant's advantages are scaled to
    description: str = ""
    gradient_combination: str = ""  # "marble": the update combines per-objective gradients (not advantages)
    raw_rewards: bool = False  # the engine gets the rewards times the regime's raw scales (sum_raw)

    @property
    def step_weighted(self) -> bool:
        """Whether its mode spreads the combined advantage over steps by TCD's weights."""
        return modes.get(self.mode).step_weighted

    @property
    def mode_fuses(self) -> bool:
        """Whether its credit mode mixes the objectives by MOCA's mixture."""
        return modes.get(self.mode).fuses

    @property
    def fuses(self) -> bool:
        """Whether the variant mixes the objectives by a learned mixture (MOCA's, or MARBLE's weights)."""
        return self.mode_fuses or bool(self.gradient_combination)

    def credit_config(self) -> CreditConfig:
        missing = sorted(set(self.options) - {f.name for f in dataclasses.fields(CreditConfig)})
        if missing:
            raise ValueError(f"credit variant {self.name!r} needs the CreditConfig option(s) {', '.join(missing)}, "
                             "which this otca_patch.credit does not have")
        return CreditConfig(mode=self.mode, **self.options)


#: Every library-only comparison mode of the engine, then MARBLE (a demo variant only).
PEERS = tuple(Variant(m, m, description=modes.get(m).title) for m in modes.names(launchable=False)) + (
    Variant("marble", "multi_grpo", gradient_combination="marble",
            description="MARBLE (min-norm of per-objective gradients; comparison)"),
)
#: The paper's baseline (raw rewards) and the gap-fill options (docs/credit.md 2.1, 3.8).
BASELINE_AND_OPTIONS = (
    Variant("sum_raw", "sum", raw_rewards=True, description="DanceGRPO (raw rewards summed; the paper's baseline)"),
    Variant("sum_window", "sum", {"reward_scale": "window"}, raw_rewards=True,
            description="DanceGRPO, raw rewards rescaled over a window (reward_scale=window)"),
    Variant("otca_window", "otca", {"reward_scale": "window"}, description="OTCA, reward_scale=window"),
    Variant("otca_maxadv", "otca", {"explore_scale": "max_advantage"}, description="OTCA, explore_scale=max_advantage"),
    Variant("multi_grpo_timed", "multi_grpo", {"objective_timing": "probe"},
            description="Multi-GRPO, objective_timing=probe (each objective over the steps that decide it)"),
    Variant("otca_timed", "otca", {"objective_timing": "probe"}, description="OTCA, objective_timing=probe"),
)
#: Raw rewards of this many earlier iterations form the running window of ``reward_scale="window"``.
REWARD_WINDOW_BATCHES = 8
#: ``objective_timing="probe"``: the map is pooled over the probes of this many earlier iterations.
TIMING_WINDOW_BATCHES = 8
CONTROLS = (
    Variant("tcd_batch", "tcd", {"weight_scope": "batch"}, description="TCD, batch schedule only (weight_scope=batch)"),
    Variant("multi_grpo_moca_rms", "multi_grpo", rescale_to="moca",
            description="Multi-GRPO shrunk to MOCA's RMS"),
    Variant("moca_beta0", "moca", {"explore": 0.0}, description="MOCA, beta = 0"),
    Variant("moca_centred", "moca", {"explore_center": True}, description="MOCA, explore_center"),
    Variant("moca_group", "moca", {"fusion": "group"}, description="MOCA, fusion=group (MGDA per group)"),
)
VARIANTS = ({m: Variant(m, m, description=modes.get(m).title) for m in MODES}
            | {v.name: v for v in BASELINE_AND_OPTIONS} | {v.name: v for v in CONTROLS} | {v.name: v for v in PEERS})
#: The ablation's rows: the paper's Table 4 order, then the controls, then the peers.
ABLATION_ORDER = (("sum_raw", "sum", "multi_grpo", "gdpo", "tcd", "moca", "otca")
                  + tuple(v.name for v in BASELINE_AND_OPTIONS[1:]) + tuple(v.name for v in CONTROLS)
                  + tuple(v.name for v in PEERS))
assert set(ABLATION_ORDER) == set(VARIANTS)


#: Short names for the reports' plain lines (``short_name``).
SHORT_NAMES = {"sum_raw": "DanceGRPO (raw sum)", "sum": "Sum", "multi_grpo": "Multi-GRPO", "gdpo": "GDPO",
               "moca": "MOCA", "otca": "OTCA", "tcd": "TCD", "tcd_batch": "TCD schedule",
               "multi_grpo_moca_rms": "Multi-GRPO at MOCA's RMS", "otca_maxadv": "OTCA (explore_scale=max_advantage)",
               "otca_window": "OTCA (reward_scale=window)", "sum_window": "DanceGRPO (raw sum, reward_scale=window)",
               "coca": "CoCA", "tempflow": "TempFlow-GRPO", "marble": "MARBLE",
               "multi_grpo_timed": "Multi-GRPO (objective_timing=probe)", "otca_timed": "OTCA (objective_timing=probe)"}


def short_name(name: str) -> str:
    return SHORT_NAMES.get(name, f"`{name}`")


def check_available(names) -> None:
    """Raise ``ValueError`` before any work if a variant needs a credit option this engine lacks."""
    for name in names:
        VARIANTS[name].credit_config()


def engine_rewards(variant: Variant, rewards: torch.Tensor, raw_scales) -> torch.Tensor:
    """The rewards ``[B, K]`` the engine sees: times the regime's ``raw_scales [K]`` for ``raw_rewards`` variants."""
    import torch  # here: `otca-patch ablate --help` reads this module's names without torch

    return rewards * torch.as_tensor(raw_scales, dtype=rewards.dtype) if variant.raw_rewards else rewards


def variant_credit(variant: Variant, rewards: torch.Tensor, latents: torch.Tensor, group_ids: torch.Tensor,
                   clean: torch.Tensor = None, step_noise: torch.Tensor = None, reward_window: torch.Tensor = None,
                   timing_map: torch.Tensor = None):
    """``(credit, advantages [B, T])`` of ``variant`` from the credit engine, given the rewards it sees
    (``engine_rewards``); for a rescaled variant the advantages are multiplied by
    ``rms(combined of rescale_to) / rms(own combined)`` on this batch. ``clean [B, T+1, ...]`` (predicted
    clean samples), ``step_noise [T]`` and ``reward_window [N, K]`` (earlier batches' rewards, for
    ``reward_scale="window"``) and the map ``timing_map [K, T]`` (for ``objective_timing="probe"``) go
    to the variants that use them."""
    from otca_patch.credit import compute_credit

    given = {"clean": clean, "step_noise": step_noise}
    extra = {name: given[name] for name in modes.get(variant.mode).needs}
    if variant.options.get("reward_scale") == "window":
        extra["reward_window"] = reward_window
    if variant.credit_config().uses_timing_map:
        extra["timing_map"] = timing_map
    credit = compute_credit(rewards, latents, group_ids, variant.credit_config(), **extra)
    if not variant.rescale_to:
        return credit, credit.advantages
    target = compute_credit(rewards, latents, group_ids, CreditConfig(mode=variant.rescale_to))
    rms = lambda x: x.pow(2).mean().sqrt()  # noqa: E731
    scale = rms(target.combined) / rms(credit.combined).clamp(min=1e-12)
    return credit, credit.advantages * scale
