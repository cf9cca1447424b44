"""Run-time invariants where a static check of the upstream file cannot reach.

``TrainedStepCheck``: the layer's per-step advantage travels with a fingerprint of each step's
latents (permuted together with it). During the first training step, every advantage column the
layer reads must carry the fingerprint of the latents upstream just trained (the ``latents``
argument of its one-step function): otherwise upstream trains its steps in another column order than
the advantage was permuted with, and the run stops with a ``PatchError`` before its first optimizer
step. Later steps pay nothing.
"""
from __future__ import annotations

import functools
import inspect

import torch

from .hooks.errors import PatchError

#: the samples key of the fingerprints ``[B, S-1, 2]``, permuted with the advantages
FINGERPRINT_KEY = "otca_step_fingerprints"


def fingerprints(latents: torch.Tensor, steps_dim: bool = True) -> torch.Tensor:
    """Sum and L2 norm of each step's latents, in float64: ``[B, S, ...] -> [B, S, 2]`` (or, with
    ``steps_dim=False``, ``[B, ...] -> [B, 2]``)."""
    flat = latents.detach().flatten(2 if steps_dim else 1).double()
    return torch.stack([flat.sum(-1), flat.norm(dim=-1)], dim=-1)


class TrainedStepCheck:
    """Watches the function upstream trains one step with, and checks each advantage column read."""

    def __init__(self, spec=None, argument: str = "latents"):
        self.spec, self.argument = spec, argument
        self.active = True  # until a training step that checked something ends
        self.trained = None  # fingerprint of the `argument` of upstream's last one-step call
        self.watched = ""
        self.checked = 0

    def permuted_keys(self, samples: dict, keys: list, latents_key: str = "latents") -> list:
        """Upstream's permuted keys plus the fingerprints of ``samples[latents_key]`` (stored now, in
        the steps' original order, like the advantages)."""
        samples[FINGERPRINT_KEY] = fingerprints(samples[latents_key])
        return list(keys) + [FINGERPRINT_KEY]

    def watch(self, function):
        """``function`` (e.g. ``grpo_one_step``), fingerprinting its ``argument`` while the check is active."""
        signature = inspect.signature(function)
        if self.argument not in signature.parameters:
            raise self._error(function.__name__, f"{function.__name__}() has no parameter {self.argument!r} "
                              f"(its parameters: {', '.join(signature.parameters)})")
        self.watched = function.__name__
        check = self

        @functools.wraps(function)
        def watched(*args, **kwargs):
            if check.active:
                check.trained = fingerprints(signature.bind(*args, **kwargs).arguments[check.argument], steps_dim=False)
            return function(*args, **kwargs)

        return watched

    def read(self, sample: dict, column, key: str) -> torch.Tensor:
        """``sample[key][:, column]``, checked against the step upstream trains while active."""
        if self.active and FINGERPRINT_KEY in sample:
            expected = sample[FINGERPRINT_KEY][:, column].to(torch.float64).cpu()
            trained = None if self.trained is None else self.trained.cpu()
            if trained is None or trained.shape != expected.shape or not torch.allclose(trained, expected,
                                                                                          rtol=1e-6, atol=1e-9):
                raise self._error(
                    "train_one_step",
                    f"the layer read the advantage of column {int(column)}, but the latents upstream's last "
                    f"{self.watched or 'one-step'}() call trained are not that column's step (upstream trains its "
                    f"steps in another order than the advantages were permuted with, or reads the advantage "
                    f"before that call)")
            self.checked += 1
        return sample[key][:, column]

    def end_step(self) -> None:
        """A training step is over: stop checking once a step checked something."""
        if self.checked:
            self.active = False
            self.trained = None

    def _error(self, function: str, problem: str) -> PatchError:
        spec = self.spec
        return PatchError(file=getattr(spec, "file", "<upstream>"), function=function,
                          anchor="run-time invariant: the advantage column read is the step trained",
                          problem=problem, verified_commit=getattr(spec, "verified_commit", "unknown"),
                          hook="trained_step_matches_advantage_column", spec=getattr(spec, "path", ""),
                          kind="invariant")
