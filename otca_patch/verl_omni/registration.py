"""The estimators registered through VeRL-Omni's own ``register_diffusion_adv_est``."""
from __future__ import annotations

import importlib

from . import binding, estimator


def register() -> tuple:
    """Registers ``otca`` and ``otca_<mode>`` (once per process); returns their names."""
    algos = importlib.import_module(binding.ALGOS_MODULE)
    names = estimator.estimator_names()
    for name, mode in names.items():
        present = algos.DIFFUSION_ADV_ESTIMATOR_REGISTRY.get(name)
        if present is not None and getattr(present, "__module__", "") == estimator.__name__:
            continue  # this process loaded the plug-in before
        algos.register_diffusion_adv_est(name)(estimator.make(name, mode))
    return tuple(names)
