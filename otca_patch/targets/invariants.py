"""Run-time invariants where a static check of the upstream file cannot reach.

``TrainedStepCheck``: during the first training step, the layer's per-step advantage travels with a
fingerprint of each step's latents (stored next to it in upstream's ``samples``, so every permutation,
filter and re-batching upstream applies to its keys moves both together). Every advantage column the
layer reads must carry the fingerprint of the latents upstream just trained (taken from the arguments
of the function it trains one step with): otherwise upstream trains its steps in another column
order than the advantage was laid out in, and the run stops with a ``PatchError`` before its first
optimizer step. Once a training step has checked a column, nothing is fingerprinted, stored or
compared any more: later steps pay nothing.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch

from ..hooks.errors import PatchError

#: the samples key of the fingerprints ``[B, S, 2]``, moved by upstream with the advantages
FINGERPRINT_KEY = "otca_step_fingerprints"
#: fingerprints of the same latents agree to float32 rounding; distinct steps differ by far more
RELATIVE_TOLERANCE = 1e-5


def fingerprints(latents: torch.Tensor, steps_dim: bool = True) -> torch.Tensor:
    """Sum and L2 norm of each step's latents, float32: ``[B, S, ...] -> [B, S, 2]`` (or, with
    ``steps_dim=False``, ``[B, ...] -> [B, 2]``).

    The latents are read in their own dtype, one step at a time, and never copied as a batch: float32
    and float64 latents are reduced in place; lower precisions (bf16, fp16) one sample and step at a
    time, each converted to float32 once (the largest buffer made: one sample's step). The result is
    float32 even for bf16 latents: bf16 keeps 8 significant bits, so two steps whose norms differ by
    less than 0.4% would get equal bf16 fingerprints; float32 tells them apart down to about 1e-6.
    """
    latents = latents.detach()
    if not steps_dim:
        return _step_fingerprint(latents)
    return torch.stack([_step_fingerprint(latents[:, step]) for step in range(latents.shape[1])], dim=1)


def _step_fingerprint(step: torch.Tensor) -> torch.Tensor:
    """``[B, ...] -> [B, 2]`` float32: the sum and the L2 norm of each row."""
    flat = step.flatten(1)
    if flat.dtype in (torch.float32, torch.float64):
        return torch.stack([flat.sum(-1), torch.linalg.vector_norm(flat, dim=-1)], dim=-1).float()
    return torch.cat([_step_fingerprint(row.float()) for row in flat.split(1)])


def same_step(trained: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether fingerprints ``[b, 2]`` describe the same latents: each entry within
    ``RELATIVE_TOLERANCE`` of that row's norm (a sum near zero is judged on the row's scale)."""
    if trained.shape != expected.shape:
        return False
    scale = expected[..., 1:].abs() + trained[..., 1:].abs()
    return bool(((trained - expected).abs() <= RELATIVE_TOLERANCE * scale + 1e-30).all())


class TrainedStepCheck:
    """Watches the function upstream trains one step with, and checks each advantage column read.

    ``argument``: the watched function's parameter holding the latents it trains ``[b, ...]``; or
    ``parameters`` and ``trained``: the parameters to require and ``trained(arguments) -> [b, ...]``
    (FlowGRPO's ``compute_log_prob(..., sample, j, ...)`` trains ``sample["latents"][:, j]``).
    ``reader``: the upstream function that reads the advantage (named in the error).
    """

    def __init__(self, spec=None, argument: str = "latents", parameters: tuple = (),
                 trained: Callable[[dict], torch.Tensor] | None = None, reader: str = "train_one_step"):
        self.spec, self.reader = spec, reader
        self.parameters = tuple(parameters) or (argument,)
        self.select = trained or (lambda arguments: arguments[argument])
        self.active = True  # until a training step that checked something ends
        self.trained = None  # fingerprint of the latents of upstream's last one-step call
        self.watched = ""
        self.checked = 0

    def store(self, samples: dict, latents_key: str = "latents") -> bool:
        """While active, put the fingerprints of ``samples[latents_key]`` ``[B, S, ...]`` (in the steps'
        current order, the order the advantage's columns are in) into ``samples``. Returns whether it did."""
        if self.active:
            samples[FINGERPRINT_KEY] = fingerprints(samples[latents_key])
        return self.active

    def permuted_keys(self, samples: dict, keys: list, latents_key: str = "latents") -> list:
        """Upstream's permuted keys, plus the fingerprints of ``samples[latents_key]`` while active."""
        return list(keys) + ([FINGERPRINT_KEY] if self.store(samples, latents_key) else [])

    def watch(self, function):
        """``function`` (e.g. ``grpo_one_step``), fingerprinting the latents it trains while the check is active."""
        signature = inspect.signature(function)
        missing = [name for name in self.parameters if name not in signature.parameters]
        if missing:
            raise self._error(function.__name__, f"{function.__name__}() has no parameter "
                              f"{', '.join(map(repr, missing))} (its parameters: {', '.join(signature.parameters)})")
        self.watched = function.__name__
        check = self

        @functools.wraps(function)
        def watched(*args, **kwargs):
            if check.active:
                trained = check.select(signature.bind(*args, **kwargs).arguments)
                check.trained = fingerprints(trained, steps_dim=False)
            return function(*args, **kwargs)

        return watched

    def read(self, sample: dict, column, key: str) -> torch.Tensor:
        """``sample[key][:, column]``, checked against the step upstream trains while active."""
        if self.active and FINGERPRINT_KEY in sample:
            expected = sample[FINGERPRINT_KEY][:, column]
            if self.trained is None or not same_step(self.trained.to(expected.device), expected):
                raise self._error(
                    self.reader,
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
