"""Reward models by name: ``available()`` lists them, ``load(name, checkpoint=PATH, ...)`` builds one.

Adapters are imported on first use, so listing names or loading one model never imports the
others' libraries (open_clip, transformers, ImageReward, DanceGRPO).
"""
from __future__ import annotations

import importlib
import inspect
import os
import types
import typing
from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

import torch

from .base import RewardModel

Factory = Callable[..., RewardModel]

# name -> "module:Class" (lazy) or a factory registered at run time.
_REGISTRY: Dict[str, Union[str, Factory]] = {
    "clip_t": "otca_patch.rewards.clip_t:ClipTReward",
    "hpsv2": "otca_patch.rewards.hpsv2:HPSv2Reward",
    "aesthetic": "otca_patch.rewards.aesthetic:AestheticReward",
    "pickscore": "otca_patch.rewards.pickscore:PickScoreReward",
    "imagereward": "otca_patch.rewards.imagereward:ImageRewardReward",
    "videoalign": "otca_patch.rewards.videoalign:VideoAlignReward",
}


def available() -> List[str]:
    """Registered reward names, in registration order."""
    return list(_REGISTRY)


def register(name: str, factory: Factory) -> None:
    """Add (or replace) a reward: ``factory(checkpoint=..., device=..., dtype=..., **options)``."""
    if not name or not isinstance(name, str):
        raise ValueError("reward name must be a non-empty str")
    _REGISTRY[name] = factory


def _factory(name: str) -> Factory:
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown reward model {name!r}; available: {', '.join(available())}") from None
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry


def load(name: str, checkpoint: Optional[Union[str, Path]] = None, device: Union[str, torch.device] = "cpu",
         dtype: Optional[torch.dtype] = None, **options) -> RewardModel:
    """Build reward ``name`` from a local checkpoint (``checkpoint`` or its ``OTCA_CKPT_*`` variable).

    ``dtype=None`` keeps the adapter's default (float32; bfloat16 for VideoAlign, as upstream runs it).
    ``options`` are adapter-specific (e.g. ``model_name`` for clip_t, ``clip_checkpoint`` for aesthetic,
    ``processor`` for pickscore, ``arch`` for hpsv2).
    """
    factory = _factory(name)
    kwargs = convert_options(name, factory, options)
    if dtype is not None:
        kwargs["dtype"] = dtype
    return factory(checkpoint=checkpoint, device=device, **kwargs)


def reward_class(name: str) -> Factory:
    """Reward ``name``'s class (or the factory registered at run time), imported, not built."""
    return _factory(name)


def named_paths(name: str, checkpoint: Optional[str] = None, options: Optional[dict] = None,
                env: Optional[dict] = None) -> Dict[str, Optional[str]]:
    """``{parameter: path or None}`` of each of reward ``name``'s checkpoint slots: what names it
    (``checkpoint``, the option, else its ``OTCA_CKPT_*`` variable), unchecked."""
    env = os.environ if env is None else env
    options = options or {}
    return {parameter: (checkpoint if parameter == "checkpoint" else options.get(parameter)) or env.get(spec.env_var)
            for parameter, spec, _ in getattr(_factory(name), "checkpoint_slots", ())}


def checkpoint_paths(name: str, checkpoint: Optional[str] = None, options: Optional[dict] = None,
                     env: Optional[dict] = None) -> Dict[str, Path]:
    """``{parameter: existing path}`` of reward ``name``'s checkpoint files, resolved as its loader
    resolves them (``checkpoint`` or the option, else its ``OTCA_CKPT_*`` variable), without building
    the model; a slot that may stay empty is left out when nothing names it. Raises
    ``CheckpointError`` saying which ``--otca_reward_ckpt`` / ``--otca_reward_opt`` flag gives it."""
    from .checkpoints import resolve

    env = os.environ if env is None else env
    options = options or {}
    paths = {}
    for parameter, spec, required in getattr(_factory(name), "checkpoint_slots", ()):
        given = checkpoint if parameter == "checkpoint" else options.get(parameter)
        if given is None and not required and not env.get(spec.env_var):
            continue  # the loader looks beside the model (imagereward's tokenizer, pickscore's processor)
        flag = (f"--otca_reward_ckpt {name}=PATH" if parameter == "checkpoint"
                else f"--otca_reward_opt {name}.{parameter}=PATH")
        paths[parameter] = resolve(spec, given, env, given_as=flag)
    return paths


def output_names(name: str) -> tuple:
    """The objective columns reward ``name`` scores (its class's ``output_names``, else ``(name,)``),
    without building the model."""
    return tuple(getattr(_factory(name), "output_names", ()) or (name,))


def check_options(name: str, options: dict) -> None:
    """``ValueError`` naming an option reward ``name`` has not, or a value that does not convert,
    without building the model (what a launch checks before it starts anything)."""
    convert_options(name, _factory(name), options)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def convert_options(name: str, factory: Factory, options: dict) -> dict:
    """Options as the adapter's parameters want them. Values given as text (``--otca_reward_opt
    clip_t.model_name=007``) stay text unless the parameter is a bool, int or float (by its annotation,
    else by its default's type): so a model name ``007`` stays ``"007"``. An option the adapter has no
    parameter for, or text that does not convert, is a ``ValueError`` naming the option."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return dict(options)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    hints = _type_hints(factory)
    converted = {}
    for key, value in options.items():
        if key not in parameters or key in ("checkpoint", "device"):
            if takes_any and key not in ("checkpoint", "device"):
                converted[key] = value
                continue
            valid = [p for p in parameters if p not in ("self", "checkpoint", "device", "dtype")]
            raise ValueError(f"reward model {name!r} has no option {key!r}; its options: {', '.join(valid) or 'none'}")
        kind = _scalar_kind(hints.get(key), parameters[key].default)
        if not isinstance(value, str) or kind is None:
            converted[key] = value
            continue
        text = value.strip()
        try:
            if kind is bool:
                if text.lower() not in _TRUE + _FALSE:
                    raise ValueError
                converted[key] = text.lower() in _TRUE
            else:
                converted[key] = kind(text)
        except ValueError:
            raise ValueError(f"reward model {name!r}: option {key}={value!r} is not a {kind.__name__}") from None
    return converted


def _type_hints(factory) -> dict:
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        return typing.get_type_hints(target)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        return {}


def _scalar_kind(annotation, default):
    """bool, int or float when the parameter is one of those (``Optional[...]`` too), else None."""
    union = typing.get_origin(annotation) in (typing.Union, getattr(types, "UnionType", typing.Union))
    candidates = typing.get_args(annotation) if union else (annotation,)
    for kind in (bool, int, float):
        if kind in candidates:
            return kind
    if annotation is None and default is not inspect.Parameter.empty and default is not None:
        return next((kind for kind in (bool, int, float) if type(default) is kind), None)
    return None
