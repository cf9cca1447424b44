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

    otca_final_state: str = flag("DanceGRPO samplers: TCD's final state z_T is the last latent ('latent', the spec) "
                                 "or the last step's predicted clean sample that upstream decodes and scores "
                                 "('prediction')", "latent", choices=("latent", "prediction"))
    otca_video_frames: int = flag("video targets: frames per video (evenly spaced) that image objectives of the "
                                  "registry score; a video's score is their mean", 4)
    otca_sync_grads: bool = flag("DanceGRPO Wan trainer (Wan2.1, Wan2.2): average gradients over ranks before "
                                 "clipping (upstream wraps the model in neither FSDP nor DDP, DanceGRPO issue #110); "
                                 "needs --otca or --otca_observe", False)
    otca_wan22: bool = flag("DanceGRPO Wan trainer: a Wan2.2-A14B checkpoint (two experts, transformer and "
                            "transformer_2, switched at boundary_ratio); detected from model_index.json too", False)
    otca_wan22_train: str = flag("Wan2.2: which experts train ('both', 'transformer' = high-noise, "
                                 "'transformer_2' = low-noise); the other still serves its steps", "both",
                                 choices=("both", "transformer", "transformer_2"))


def target_only_flags() -> tuple:
    """The names of the flags that mean something for some targets only: a target takes one exactly
    when its spec lists it in ``[target] flags``."""
    return tuple(f.name for f in fields(TargetOptions))


def given_target_flags(config) -> list:
    """The target-only flags ``config`` (an ``OtcaConfig``) sets to something other than their default."""
    return [f.name for f in fields(TargetOptions)
            if getattr(config, f.name) != (f.default if f.default is not MISSING else f.default_factory())]


def refuse_foreign_flags(config, target: str, accepted) -> None:
    """A target-only flag given to a target whose spec does not list it is an error naming both."""
    foreign = [name for name in given_target_flags(config) if name not in accepted]
    if foreign:
        takes = f" (flags of this target: {', '.join('--' + f for f in sorted(accepted))})" if accepted else ""
        raise ValueError(f"{', '.join('--' + name for name in foreign)}: not a flag of target {target}{takes}")
