"""How the credit reaches VeRL-Omni's batch: its ``compute_advantage`` passes an estimator only the summed
reward, so both trainers' bindings of it are replaced by a wrapper that, for the plug-in's estimators
only, makes the batch visible to the estimator for the call and refuses what it cannot credit. Before it
binds anything it checks the installed VeRL-Omni against the contract it was verified on (``contract.py``)
and stops in one line naming what differs."""
from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import inspect
from pathlib import Path

from . import contract

_BATCH = contextvars.ContextVar("otca_verl_omni_batch", default=None)
MODULES = {contract.TRAINER: "verl_omni.trainer.diffusion.ray_diffusion_trainer",
           contract.TRAINER_V1: "verl_omni.trainer.diffusion.v1.trainer_base"}
ALGOS_MODULE = "verl_omni.trainer.diffusion.diffusion_algos"
WRAPPED = "__otca_verl_omni_wraps__"


class ContractError(RuntimeError):
    """The installed VeRL-Omni is not what the plug-in was verified on."""


def installed_root() -> Path:
    spec = importlib.util.find_spec("verl_omni")
    if spec is None or not spec.submodule_search_locations:
        raise ContractError("otca_patch.verl_omni: VeRL-Omni (verl_omni) is not importable here")
    return Path(list(spec.submodule_search_locations)[0]).parent


def verify() -> None:
    """The installed VeRL-Omni's files hold the contract, and the live objects are those files' own."""
    root = installed_root()
    differs = contract.problems(root)
    if differs:
        raise ContractError(f"otca_patch.verl_omni: VeRL-Omni at {root} is not the one the plug-in was verified on "
                            f"({contract.VERIFIED_COMMIT[:7]}): {differs[0]}"
                            + (f" (and {len(differs) - 1} more; `otca-patch doctor {root}` lists them)"
                               if len(differs) > 1 else ""))
    algos = importlib.import_module(ALGOS_MODULE)
    registry = getattr(algos, "DIFFUSION_ADV_ESTIMATOR_REGISTRY", None)
    if not isinstance(registry, dict) or "flow_grpo" not in registry:
        raise ContractError(f"otca_patch.verl_omni: {ALGOS_MODULE}.DIFFUSION_ADV_ESTIMATOR_REGISTRY is not the "
                            f"registry of flow_grpo the plug-in was verified on")
    expected = contract.FUNCTIONS[0].parameters
    for file, name in MODULES.items():
        function = original(getattr(importlib.import_module(name), "compute_advantage", None))
        where = Path(getattr(getattr(function, "__code__", None), "co_filename", "")).resolve()
        if function is None or where != (root / contract.TRAINER).resolve():
            raise ContractError(f"otca_patch.verl_omni: {name}.compute_advantage is not the function of "
                                f"{contract.TRAINER} (found {function!r} from {where})")
        parameters = tuple(inspect.signature(function).parameters)
        if parameters != expected:
            raise ContractError(f"otca_patch.verl_omni: {name}.compute_advantage takes ({', '.join(parameters)}); "
                                f"verified: ({', '.join(expected)})")


def original(function):
    """VeRL-Omni's own function behind the plug-in's wrapper (itself when not wrapped)."""
    return getattr(function, WRAPPED, function)


def current_batch(estimator: str):
    """The batch of the ``compute_advantage`` call in progress."""
    data = _BATCH.get()
    if data is None:
        raise ValueError(f"{estimator}: called without its batch; it runs only through VeRL-Omni's compute_advantage "
                         f"with otca_patch.verl_omni loaded (actor_rollout_ref.model.external_lib)")
    return data


def wrap(function, ours):
    """``compute_advantage`` that hands the batch to the estimators named in ``ours``."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def compute_advantage(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        name = str(getattr(arguments.arguments["adv_estimator"], "value", arguments.arguments["adv_estimator"]))
        if name not in ours:
            return function(*args, **kwargs)
        if not arguments.arguments["norm_adv_by_std_in_grpo"]:
            raise ValueError(f"{name}: algorithm.norm_adv_by_std_in_grpo is false; the credit always divides each "
                             f"objective by its std (set it to true, or use flow_grpo for Dr.GRPO)")
        token = _BATCH.set(arguments.arguments["data"])
        try:
            return function(*args, **kwargs)
        finally:
            _BATCH.reset(token)

    setattr(compute_advantage, WRAPPED, function)
    return compute_advantage


def bind(ours) -> None:
    """Both trainers' ``compute_advantage`` replaced by one wrapper (once)."""
    trainer = importlib.import_module(MODULES[contract.TRAINER])
    function = original(trainer.compute_advantage)
    wrapper = trainer.compute_advantage if trainer.compute_advantage is not function else wrap(function, ours)
    for name in MODULES.values():
        setattr(importlib.import_module(name), "compute_advantage", wrapper)
