"""``OtcaConfig``: the layer's one configuration object; its fields are the command-line flags."""
from __future__ import annotations

import argparse
import os
import shlex
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Optional, Sequence

from .credit import MODES, CreditConfig

#: The environment variable through which `scripts/otca_run.sh` hands the flags to every process
#: that a launcher (torchrun, accelerate) starts: upstream shell scripts pass fixed arguments.
ENV_ARGS = "OTCA_PATCH_ARGS"
FLAG_PREFIX = "--otca"


def _flag(help_text: str, default=MISSING, default_factory=MISSING, **argparse_options):
    meta = {"help": help_text, "argparse": argparse_options}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class OtcaConfig:
    """Every ``--otca*`` flag. Credit options mirror ``CreditConfig`` (same defaults: the spec's)."""

    otca: bool = _flag("replace upstream's advantage by OTCA's per-step, objective-aware one", False)
    otca_observe: bool = _flag("score and log every objective and the credit, but train exactly as vanilla", False)
    otca_mode: str = _flag(f"credit mode: {', '.join(MODES)}", "otca", choices=MODES)
    otca_rewards: tuple = _flag("objectives in order, comma-separated: 'upstream' (the reward upstream "
                                "computes) and reward-registry names", ("upstream",))
    otca_reward_ckpt: dict = _flag("NAME=PATH checkpoint of a registry reward (repeatable or comma-separated)",
                                   default_factory=dict)
    otca_reward_opt: dict = _flag("NAME.KEY=VALUE option of a registry reward, e.g. clip_t.model_name=ViT-B-32 "
                                  "(repeatable or comma-separated)", default_factory=dict)
    otca_objective_weights: Optional[tuple] = _flag("s_k per objective, comma-separated (default all 1)", None)
    otca_w_min: float = _flag("smallest TCD step weight, in [0, 1]", 0.5)
    otca_eps: float = _flag("TCD / exploration smoothing", 1e-6)
    otca_adv_eps: float = _flag("added to the group std (DanceGRPO's 1e-8)", 1e-8)
    otca_std_correction: int = _flag("Bessel correction of every std", 1)
    otca_explore: float = _flag("MOCA exploration bias beta (>= 0)", 1.0)
    otca_std_scope: str = _flag("std that normalises rewards: 'group' (the spec) or 'batch' (FlowGRPO's "
                                "global_std)", "group", choices=("group", "batch"))
    otca_log_dir: str = _flag("where run_log.jsonl is written", "otca_logs")
    otca_reward_device: str = _flag("device of the registry reward models (default: the trainer's)", "")
    otca_video_frames: int = _flag("video targets: frames per video (evenly spaced) that image objectives of the "
                                   "registry score; a video's score is their mean", 4)
    otca_sync_grads: bool = _flag("DanceGRPO Wan2.1 only: average gradients over ranks before clipping (upstream "
                                  "wraps the model in neither FSDP nor DDP, DanceGRPO issue #110); needs --otca or "
                                  "--otca_observe", False)
    otca_wan22: bool = _flag("DanceGRPO Wan trainer: a Wan2.2-A14B checkpoint (two experts, transformer and "
                             "transformer_2, switched at boundary_ratio); detected from model_index.json too", False)
    otca_wan22_train: str = _flag("Wan2.2: which experts train ('both', 'transformer' = high-noise, "
                                  "'transformer_2' = low-noise); the other still serves its steps", "both",
                                  choices=("both", "transformer", "transformer_2"))

    def __post_init__(self) -> None:
        self.otca_rewards = tuple(self.otca_rewards)
        if not self.otca_rewards or any(not name for name in self.otca_rewards):
            raise ValueError(f"--otca_rewards: give at least one objective name, got {','.join(self.otca_rewards)!r}")
        if len(set(self.otca_rewards)) != len(self.otca_rewards):
            raise ValueError(f"--otca_rewards: objectives repeat: {','.join(self.otca_rewards)}")
        if self.otca_objective_weights is not None:
            self.otca_objective_weights = tuple(float(w) for w in self.otca_objective_weights)
            if len(self.otca_objective_weights) != len(self.otca_rewards):
                raise ValueError(f"--otca_objective_weights: {len(self.otca_objective_weights)} weights for "
                                 f"{len(self.otca_rewards)} objectives ({','.join(self.otca_rewards)})")
        if self.otca and self.otca_observe:
            raise ValueError("--otca and --otca_observe exclude each other: observe trains vanilla")
        if self.otca_sync_grads and not self.active:
            raise ValueError("--otca_sync_grads needs --otca or --otca_observe (the fix is installed by the layer)")
        if (self.otca_wan22 or self.otca_wan22_train != "both") and not self.active:
            raise ValueError("--otca_wan22 / --otca_wan22_train need --otca or --otca_observe (the layer loads the experts)")
        if self.otca_video_frames < 1:
            raise ValueError(f"--otca_video_frames: need at least 1 frame, got {self.otca_video_frames}")
        self.credit_config()  # validates every credit option, naming it

    @property
    def active(self) -> bool:
        """Whether the layer rewrites the upstream script at all (vanilla runs stay untouched)."""
        return self.otca or self.otca_observe

    def credit_config(self) -> CreditConfig:
        try:
            return CreditConfig(mode=self.otca_mode, w_min=self.otca_w_min, eps=self.otca_eps,
                                adv_eps=self.otca_adv_eps, std_correction=self.otca_std_correction,
                                explore=self.otca_explore, objective_weights=self.otca_objective_weights,
                                std_scope=self.otca_std_scope)
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
        argv = []
        default = OtcaConfig()
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            if isinstance(value, bool):
                argv.append(f"--{f.name}")
            elif f.name == "otca_reward_opt":
                argv += [f"--{f.name}", ",".join(f"{name}.{k}={v}" for name, opts in value.items()
                                                 for k, v in opts.items())]
            elif isinstance(value, dict):
                argv += [f"--{f.name}", ",".join(f"{k}={v}" for k, v in value.items())]
            elif isinstance(value, tuple):
                argv += [f"--{f.name}", ",".join(str(v) for v in value)]
            else:
                argv += [f"--{f.name}", str(value)]
        return argv


def _csv(text: str) -> tuple:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _floats(text: str) -> tuple:
    try:
        return tuple(float(part) for part in _csv(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _checkpoints(text: str) -> dict:
    pairs = {}
    for item in _csv(text):
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {item!r}")
        pairs[name.strip()] = path.strip()
    return pairs


def _option_value(text: str):
    """Numbers and booleans as such; anything else stays a string (paths, model names)."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _reward_options(text: str) -> dict:
    options: dict = {}
    for item in _csv(text):
        key, sep, value = item.partition("=")
        name, dot, option = key.partition(".")
        if not sep or not dot or not name or not option:
            raise argparse.ArgumentTypeError(f"expected NAME.KEY=VALUE, got {item!r}")
        options.setdefault(name.strip(), {})[option.strip()] = _option_value(value.strip())
    return options


_TYPES = {"otca_rewards": _csv, "otca_objective_weights": _floats, "otca_reward_ckpt": _checkpoints}


def build_parser() -> argparse.ArgumentParser:
    """An argparse parser generated from ``OtcaConfig``'s fields (one flag per field)."""
    parser = argparse.ArgumentParser(prog="otca-patch flags", add_help=False, allow_abbrev=False)
    for f in fields(OtcaConfig):
        options = dict(f.metadata.get("argparse", {}))
        flag = f"--{f.name}"
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", help=f.metadata["help"])
        elif f.name in ("otca_reward_ckpt", "otca_reward_opt"):
            kind = _checkpoints if f.name == "otca_reward_ckpt" else _reward_options
            parser.add_argument(flag, type=kind, action="append", help=f.metadata["help"])
        else:
            kind = _TYPES.get(f.name) or {"float": float, "int": int}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, help=f.metadata["help"], **options)
    return parser


#: flags that take no value
_SWITCHES = {f"--{f.name}" for f in fields(OtcaConfig) if f.type in ("bool", bool)}


def parse_otca_args(argv: Sequence[str]) -> tuple[OtcaConfig, list[str]]:
    """Split ``argv`` into the layer's flags (as an ``OtcaConfig``) and everything else, in order.

    An unknown ``--otca*`` flag is an error that lists the valid ones (it must never reach, and
    confuse, upstream's own parser).
    """
    known = {f"--{f.name}" for f in fields(OtcaConfig)}
    ours, rest = [], []
    tokens = list(argv)
    position = 0
    while position < len(tokens):
        token = tokens[position]
        flag = token.split("=", 1)[0]
        if flag.startswith(FLAG_PREFIX):
            if flag not in known:
                raise ValueError(f"unknown flag {flag}; otca-patch flags are: {', '.join(sorted(known))}")
            ours.append(token)
            takes_value = flag not in _SWITCHES and "=" not in token
            if takes_value:
                if position + 1 >= len(tokens):
                    raise ValueError(f"flag {flag} needs a value")
                ours.append(tokens[position + 1])
                position += 1
        else:
            rest.append(token)
        position += 1
    parser = build_parser()
    try:
        namespace = parser.parse_args(ours)
    except SystemExit:
        raise ValueError(f"invalid otca-patch flags: {shlex.join(ours)}") from None
    values = {k: v for k, v in vars(namespace).items() if v is not None and v is not False}
    if "otca_reward_ckpt" in values:
        values["otca_reward_ckpt"] = {k: v for part in values["otca_reward_ckpt"] for k, v in part.items()}
    if "otca_reward_opt" in values:
        merged: dict = {}
        for part in values["otca_reward_opt"]:
            for name, options in part.items():
                merged.setdefault(name, {}).update(options)
        values["otca_reward_opt"] = merged
    return OtcaConfig(**values), rest


def config_from_environment(argv: Sequence[str] = ()) -> tuple[OtcaConfig, list[str]]:
    """Flags from ``$OTCA_PATCH_ARGS`` followed by those in ``argv`` (which win); returns the rest of argv."""
    env_tokens = shlex.split(os.environ.get(ENV_ARGS, ""))
    _, leftover = parse_otca_args(env_tokens)
    if leftover:
        raise ValueError(f"${ENV_ARGS} holds arguments that are not otca-patch flags: {shlex.join(leftover)}")
    config, rest = parse_otca_args(env_tokens + list(argv))
    return config, rest
