"""The flags that only some targets take: each target's spec lists those it takes (``[target] flags``),
and its runtime reads and checks their values.

They are declared here, not in a target's runtime, because flags are parsed before any target is
chosen, in every process, and an unknown ``--otca*`` flag is an error there: ``OtcaConfig`` takes
these fields from ``TargetOptions`` (``flags.include``). The hook engine reads their names from here
to check a spec's list. A new target-only flag is a field of ``TargetOptions``.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from .flags import flag


@dataclass
class TargetOptions:
    """The target-only flags (each one's help says which targets take it)."""

    otca_final_state: str = flag("DanceGRPO samplers: TCD's final state z_T is the last latent ('latent', the paper's) "
                                 "or the last step's predicted clean sample that upstream decodes and scores "
                                 "('prediction')", "latent", choices=("latent", "prediction"))
    otca_video_frames: int = flag("video targets: frames per video (evenly spaced) that image objectives of the "
                                  "registry score; a video's score is their mean", 4)
    otca_sync_grads: bool = flag("DanceGRPO Wan trainer (Wan2.1, Wan2.2): average gradients over ranks before "
                                 "clipping (upstream wraps the model in neither FSDP nor DDP); "
                                 "needs --otca or --otca_observe", False)
    otca_wan22: bool = flag("DanceGRPO Wan trainer: a Wan2.2-A14B checkpoint (two experts, transformer and "
                            "transformer_2, switched at boundary_ratio); detected from model_index.json too", False)
    otca_wan22_train: str = flag("Wan2.2: which experts train ('both', 'transformer' = high-noise, "
                                 "'transformer_2' = low-noise); the other still serves its steps", "both",
                                 choices=("both", "transformer", "transformer_2"))
    otca_probe_every: int = flag("targets with the objective-timing probe (docs/credit.md 9.3), under "
                                 "--otca_objective_timing probe: training steps between probes (steps 1, 1+N, ...)", 10)
    otca_probe_samples: int = flag("objective-timing probe: the first M samples of each rank's rollout are probed "
                                   "(give whole prompt groups: the map is a within-group measure)", 12)
    otca_probe_window: int = flag("objective-timing probe: the map a step's credit uses is pooled over the last W "
                                  "probes before it", 8)


#: the flag a spec lists when its target has the objective-timing probe (it then takes the option ``probe``)
PROBE_FLAG = "otca_probe_every"


def target_only_flags() -> tuple:
    """The names of the flags that mean something for some targets only: a target takes one exactly
    when its spec lists it in ``[target] flags``."""
    return tuple(f.name for f in fields(TargetOptions))


def given_target_flags(config) -> list:
    """The target-only flags ``config`` (an ``OtcaConfig``) sets to something other than their default."""
    return [f.name for f in fields(TargetOptions)
            if getattr(config, f.name) != (f.default if f.default is not MISSING else f.default_factory())]


def refuse_foreign_flags(config, target: str, accepted, probing) -> None:
    """A target-only flag given to a target whose spec does not list it is an error naming both;
    ``--otca_objective_timing`` given to a target without the probe, one naming ``probing()``: the
    targets that have it (``hooks.spec.probing_targets``, read from the specs)."""
    if config.credit_config().uses_timing_map and PROBE_FLAG not in accepted:
        # docs/credit.md 9.3: without a probe the map is never measured and the option would silently
        # train by the mode's own rule
        raise ValueError(f"--otca_objective_timing: target {target} has no probe of predicted clean samples, so "
                         "the map the option needs is never measured; use a target that probes "
                         f"({', '.join(probing())}), the demo (otca-patch ablate --modes "
                         "multi_grpo_timed,otca_timed) or the library")
    foreign = [name for name in given_target_flags(config) if name not in accepted]
    if foreign:
        takes = f" (flags of this target: {', '.join('--' + f for f in sorted(accepted))})" if accepted else ""
        raise ValueError(f"{', '.join('--' + name for name in foreign)}: not a flag of target {target}{takes}")
