"""``OtcaConfig``: the layer's one configuration object; its fields are the command-line flags."""
from __future__ import annotations

import argparse
import os
import shlex
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from . import env_names, flags
from .credit import CreditConfig
from .flags import flag
from .suggest import did_you_mean
from .target_options import TargetOptions, given_target_flags

FLAG_PREFIX = "--otca"
#: how --otca_objective_weights addresses objectives (said in every message about their count)
WEIGHTS_RULE = "give one weight per objective column once names expand (upstream can stand for several)"


def _credit_flag(field) -> bool:
    """Whether a ``CreditConfig`` field is an ``--otca_`` flag (not a library-only option)."""
    return not field.metadata.get("library_only")


@dataclass
@flags.include(TargetOptions, after="otca_reward_device")
@flags.include(CreditConfig, prefix="otca_", after="otca_reward_opt", keep=_credit_flag)
class OtcaConfig:
    """Every ``--otca*`` flag. The credit options (``otca_mode``, ``otca_w_min``, ...) are
    ``CreditConfig``'s fields, prefixed: their type, default, help and choices are read from there."""

    otca: bool = flag("replace upstream's advantage by OTCA's per-step, objective-aware one", False)
    otca_observe: bool = flag("score and log every objective and the credit, but train exactly as vanilla", False)
    otca_rewards: tuple[str, ...] = flag("objectives in order, comma-separated: 'upstream' (the reward upstream "
                                         "computes) and reward-registry names", ("upstream",))
    otca_reward_ckpt: dict = flag("NAME=PATH checkpoint of a registry reward (repeatable or comma-separated)",
                                  default_factory=dict, parse=flags.name_values, format=flags.format_name_values)
    otca_reward_opt: dict = flag("NAME.KEY=VALUE option of a registry reward, e.g. clip_t.model_name=ViT-B-32 "
                                 "(repeatable or comma-separated)", default_factory=dict,
                                 parse=flags.name_options, format=flags.format_name_options)
    otca_target: dict = flag("NAME=PATH: apply spec NAME to the file at PATH, e.g. a copy of an upstream trainer "
                             "(repeatable; NAME as `otca-patch doctor` lists it)", default_factory=dict,
                             parse=flags.spec_targets, format=flags.format_spec_targets)
    otca_log_dir: str = flag("where run_log.jsonl is written", "otca_logs")
    otca_reward_device: str = flag("device of the registry reward models: the trainer's by default "
                                   "(this rank's GPU, cuda:{LOCAL_RANK}); 'cuda:local' says so explicitly, "
                                   "'cpu' or 'cuda:N' pins one device for every rank", "")
    otca_rank_check_timeout: Optional[float] = flag("seconds, from the first rank's registration, that the patched "
                                                    "ranks wait for every rank of the process group to register the "
                                                    "same layer, upstream file, flags and reward checkpoints before "
                                                    "the first rollout; a missing or different rank stops them all "
                                                    "(default: the process group's own timeout, 10 min under NCCL)",
                                                    None)

    def __post_init__(self) -> None:
        self.otca_rewards = tuple(self.otca_rewards)
        if not self.otca_rewards or any(not name for name in self.otca_rewards):
            raise ValueError(f"--otca_rewards: give at least one objective name, got {','.join(self.otca_rewards)!r}")
        if len(set(self.otca_rewards)) != len(self.otca_rewards):
            raise ValueError(f"--otca_rewards: objectives repeat: {','.join(self.otca_rewards)}")
        if self.otca_objective_weights is not None:
            self.otca_objective_weights = tuple(float(w) for w in self.otca_objective_weights)
            # weights address the columns once names expand (objective_set.Objectives checks the
            # exact count); a name never expands to fewer than one column, so fewer is always wrong
            if len(self.otca_objective_weights) < len(self.otca_rewards):
                raise ValueError(f"--otca_objective_weights: {len(self.otca_objective_weights)} weights for "
                                 f"{len(self.otca_rewards)} objectives ({','.join(self.otca_rewards)}); "
                                 f"{WEIGHTS_RULE}")
        if self.otca and self.otca_observe:
            raise ValueError("--otca and --otca_observe exclude each other: observe trains vanilla")
        given = given_target_flags(self)
        if given and not self.active:
            # a target's runtime acts on them, and a vanilla run has none: never silently ignored
            raise ValueError(f"{', '.join('--' + name for name in given)}: target-only flags need --otca or "
                             f"--otca_observe (the layer acts on them)")
        if not self.otca_log_dir.strip():
            raise ValueError("--otca_log_dir: empty; give the folder for run_log.jsonl (default otca_logs)")
        if self.otca_video_frames < 1:
            raise ValueError(f"--otca_video_frames: give at least 1 frame per video, got {self.otca_video_frames}")
        if self.otca_rank_check_timeout is not None and not self.otca_rank_check_timeout > 0:
            raise ValueError(f"--otca_rank_check_timeout: give a positive number of seconds, got {self.otca_rank_check_timeout}")
        self.credit_config()  # validates every credit option, naming it

    @property
    def active(self) -> bool:
        """Whether the layer rewrites the upstream script at all (vanilla runs stay untouched)."""
        return self.otca or self.otca_observe

    def credit_config(self) -> CreditConfig:
        try:
            return CreditConfig(**flags.included(self, CreditConfig, prefix="otca_", keep=_credit_flag))
        except ValueError as exc:
            raise ValueError(f"--otca_{exc}") from None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["otca_rewards"] = list(self.otca_rewards)
        if self.otca_objective_weights is not None:
            data["otca_objective_weights"] = list(self.otca_objective_weights)
        return data

    def to_argv(self) -> list[str]:
        """Flags that ``parse_otca_args`` turns back into this config (only non-defaults)."""
        return flags.to_argv(self)


def build_parser() -> argparse.ArgumentParser:
    """An argparse parser generated from ``OtcaConfig``'s fields (one flag per field)."""
    parser = flags.OneLineParser(prog="otca-patch flags", add_help=False, allow_abbrev=False)
    return flags.add_flags(parser, OtcaConfig)


def parse_otca_args(argv: Sequence[str]) -> tuple[OtcaConfig, list[str]]:
    """Split ``argv`` into the layer's flags (as an ``OtcaConfig``) and everything else, in order.

    An unknown ``--otca*`` flag is an error that lists the valid ones (it must never reach, and
    confuse, upstream's own parser).
    """
    known, switches = flags.flag_names(OtcaConfig), flags.switches(OtcaConfig)
    ours, rest = [], []
    tokens = list(argv)
    position = 0
    while position < len(tokens):
        token = tokens[position]
        name = token.split("=", 1)[0]
        if name.startswith(FLAG_PREFIX):
            if name not in known:
                raise ValueError(f"unknown flag {name}{did_you_mean(name, known)} (`otca-patch launch --help` "
                                 f"lists the flags)")
            ours.append(token)
            takes_value = name not in switches and "=" not in token
            if takes_value:
                if position + 1 >= len(tokens):
                    raise ValueError(f"flag {name} needs a value")
                ours.append(tokens[position + 1])
                position += 1
        else:
            rest.append(token)
        position += 1
    namespace = build_parser().parse_args(ours)  # a bad value: one ValueError line naming the flag
    return flags.from_namespace(OtcaConfig, namespace), rest


def environment_flags_note(prog: str) -> Optional[str]:
    """The line saying that flags come from ``$OTCA_PATCH_ARGS`` rather than the command line (a
    stale ``export`` would switch the layer on unseen), or ``None``: not set, or set by the
    ``otca-patch launch`` this process belongs to (which printed its flags already)."""
    text = os.environ.get(env_names.ARGS, "").strip()
    if not text or os.environ.get(env_names.COMMAND):
        return None
    return (f"{prog}: flags from ${env_names.ARGS}, not from the command line: {text} "
            f"(`unset {env_names.ARGS}` to run without them)")


def config_from_environment(argv: Sequence[str] = ()) -> tuple[OtcaConfig, list[str]]:
    """Flags from ``$OTCA_PATCH_ARGS`` followed by those in ``argv`` (which win); returns the rest of argv."""
    env_tokens = shlex.split(os.environ.get(env_names.ARGS, ""))
    _, leftover = parse_otca_args(env_tokens)
    if leftover:
        raise ValueError(f"${env_names.ARGS} holds arguments that are not otca-patch flags: {shlex.join(leftover)}")
    config, rest = parse_otca_args(env_tokens + list(argv))
    return config, rest
