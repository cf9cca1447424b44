"""OTCA as VeRL-Omni advantage estimators (docs/verl-omni.md).

Loaded by VeRL-Omni as ``actor_rollout_ref.model.external_lib=otca_patch.verl_omni``: importing it in a
process running VeRL-Omni (``verl_omni`` imported) checks the installed VeRL-Omni against the contract the
plug-in was verified on (stopping in one line naming what differs), registers the estimators ``otca``
and ``otca_<mode>`` through VeRL-Omni's registry, and binds the ``compute_advantage`` wrapper in both
trainers. Imported anywhere else (``otca-patch doctor``, the package's import check) it does nothing:
``install()`` does it explicitly.
"""
from __future__ import annotations

import sys


def install() -> tuple:
    """Verify, register, bind; returns the estimator names. Idempotent."""
    from . import binding, registration

    binding.verify()
    names = registration.register()
    binding.bind(set(names))
    return names


if "verl_omni" in sys.modules:
    install()
