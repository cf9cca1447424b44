"""The plug-in's settings from a VeRL-Omni run's config: ``algorithm.otca.<field>`` for the fields of
``OtcaConfig`` that apply there (``--otca_<field>`` on the command line), the objectives' keys and
weights from the run's ``reward.reward_functions``, and the trainer's ``adv_clip_max``."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from ..config import OtcaConfig, _credit_flag
from ..credit import CreditConfig
from ..suggest import did_you_mean

PREFIX = "algorithm.otca"
#: OtcaConfig's fields that apply under VeRL-Omni besides the credit options: the objectives and the log folder
PLUGIN_FIELDS = ("otca_rewards", "otca_log_dir")
UPSTREAM = "upstream"
#: where VeRL-Omni's actor clips the advantages it trains on
ADV_CLIP_MAX = "actor_rollout_ref.actor.diffusion_loss.adv_clip_max"
REWARD_FUNCTIONS = "reward.reward_functions"


def field_names() -> tuple:
    """The keys ``algorithm.otca`` accepts: OtcaConfig's credit flags and ``PLUGIN_FIELDS``, unprefixed."""
    credit = [f"otca_{f.name}" for f in fields(CreditConfig) if _credit_flag(f)]
    return tuple(name[len("otca_"):] for name in (*PLUGIN_FIELDS, *credit))


@dataclass(frozen=True)
class Settings:
    config: OtcaConfig
    credit: CreditConfig
    objectives: tuple  # "upstream" (the summed reward) or keys of reward/<key>
    adv_clip_max: float


def _plain(value):
    """OmegaConf containers to Python ones (lists to tuples)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    return tuple(value) if isinstance(value, list) else value


def _given(algorithm) -> dict:
    """``algorithm.otca`` as a dict, each key checked against ``field_names``."""
    node = algorithm.get("otca") if algorithm is not None else None
    given = dict(_plain(node) or {})
    known = field_names()
    unused = {f.name[len("otca_"):] for f in fields(OtcaConfig)} - set(known) - {""}
    for key in given:
        if key in unused:
            raise ValueError(f"{PREFIX}.{key}: --otca_{key} does not apply under VeRL-Omni (the keys that do: "
                             f"{', '.join(known)})")
        if key not in known:
            raise ValueError(f"{PREFIX}.{key}: unknown key{did_you_mean(key, known)} (the keys: {', '.join(known)})")
    for key in ("rewards", "objective_weights"):
        if isinstance(given.get(key), str):
            given[key] = tuple(part.strip() for part in given[key].split(",") if part.strip())
    return given


def _root(algorithm):
    """The whole run config the ``algorithm`` node belongs to (OmegaConf keeps the parent)."""
    getter = getattr(algorithm, "_get_root", None)
    return getter() if getter is not None else None


def _select(root, key: str):
    from omegaconf import OmegaConf

    return None if root is None else OmegaConf.select(root, key, default=None)


def _reward_functions(root) -> dict:
    functions = _select(root, REWARD_FUNCTIONS)
    return dict(_plain(functions) or {})


def _required(entry: dict) -> bool:
    value = entry.get("required", False)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _objectives(given: dict, functions: dict) -> tuple[tuple, Optional[tuple]]:
    """The objectives and their default weights: ``algorithm.otca.rewards``, else every reward function
    of the run (weights from there), else the summed reward alone."""
    if "rewards" in given:
        names = tuple(given["rewards"])
        unknown = [n for n in names if n != UPSTREAM and functions and n not in functions]
        if unknown:
            raise ValueError(f"{PREFIX}.rewards: {', '.join(unknown)} is not a key of {REWARD_FUNCTIONS} "
                             f"({', '.join(functions)}), nor '{UPSTREAM}' (the summed reward)")
        weights = None
    elif functions:
        names = tuple(functions)
        weights = tuple(float(functions[n].get("weight", 1.0)) for n in names)
    else:
        names, weights = (UPSTREAM,), None
    optional = [n for n in names if n in functions and not _required(functions[n])]
    if optional:
        raise ValueError(f"{REWARD_FUNCTIONS}.{optional[0]}.required is false: VeRL-Omni scores a failing "
                         f"{optional[0]} as 0 (MultiVisualRewardManager.run_single), which the credit would train on; "
                         f"set required: true for every objective of {PREFIX}.rewards")
    return names, weights


def from_algorithm(algorithm, mode: Optional[str] = None) -> Settings:
    """The settings of the estimator named for ``mode`` (None: ``algorithm.otca.mode``, default otca).

    Raises ValueError in one line naming the ``algorithm.otca`` key (or run config key) that is wrong.
    """
    given = _given(algorithm)
    root = _root(algorithm)
    if mode is not None and given.get("mode", mode) != mode:
        raise ValueError(f"{PREFIX}.mode: {given['mode']!r}, but the estimator otca_{mode} is mode {mode!r} "
                         f"(drop the key, or use algorithm.adv_estimator=otca)")
    names, weights = _objectives(given, _reward_functions(root))
    values = {f"otca_{key}": value for key, value in given.items() if key != "rewards"}
    if mode is not None:
        values["otca_mode"] = mode
    if weights is not None and "otca_objective_weights" not in values:
        values["otca_objective_weights"] = weights
    try:
        config = OtcaConfig(otca=True, otca_rewards=names, **values)
        credit = config.credit_config()
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc).replace("--otca_", f"{PREFIX}.")) from None
    clip = _select(root, ADV_CLIP_MAX)
    if clip is None:
        raise ValueError(f"{ADV_CLIP_MAX}: not in the run config; the credit is clipped as the actor clips it")
    return Settings(config=config, credit=credit, objectives=names, adv_clip_max=float(clip))
