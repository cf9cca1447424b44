"""The checks of the inputs that some credit modes declare (``modes.INPUTS``): each turns the argument
given to ``compute_credit`` into what the mode's function reads in ``Shared.inputs``, or raises a
``ValueError`` naming the argument. The engine calls them by input name, for the mode's ``needs``."""
from __future__ import annotations

from typing import Callable

import torch

from . import tcd

_WORK = torch.float64
_CHECKS: dict = {}


def _check(name: str) -> Callable:
    def register(function: Callable) -> Callable:
        _CHECKS[name] = function
        return function
    return register


def prepare(name: str, value, mode: str, batch: int, n_steps: int, chunk_bytes: int):
    """Input ``name`` for mode ``mode`` checked against ``batch`` samples of ``n_steps`` steps."""
    return _CHECKS[name](value, mode, batch, n_steps, chunk_bytes)


def checked_inputs() -> frozenset:
    """The inputs that have a check here."""
    return frozenset(_CHECKS)


@_check("clean")
def _clean(clean, mode: str, batch: int, n_steps: int, chunk_bytes: int) -> torch.Tensor:
    """``clean [B, T+1, ...]``, the predicted clean sample at each state ``z_0 .. z_{T-1}`` then the
    final sample, becomes each one's cosine similarity to the final sample, ``[B, T+1]`` float64."""
    if not isinstance(clean, torch.Tensor) or not clean.is_floating_point() or clean.dim() < 3 or \
            tuple(clean.shape[:2]) != (batch, n_steps + 1):
        raise ValueError(f"clean: mode {mode} needs a float tensor [B, T+1, ...] = [{batch}, {n_steps + 1}, ...] "
                         f"(predicted clean sample at every state, the final sample last), got "
                         f"{getattr(clean, 'shape', type(clean).__name__)}")
    check_finite("clean", clean)
    return tcd.similarity_to_final(clean, chunk_bytes=chunk_bytes).to(_WORK)


@_check("step_noise")
def _step_noise(step_noise, mode: str, batch: int, n_steps: int, chunk_bytes: int) -> torch.Tensor:
    """``step_noise [T]`` or ``[B, T]``, the std of each SDE transition (each > 0), in float64."""
    if not isinstance(step_noise, torch.Tensor) or not step_noise.is_floating_point() or \
            tuple(step_noise.shape) not in ((n_steps,), (batch, n_steps)):
        raise ValueError(f"step_noise: mode {mode} needs a float tensor [T] or [B, T] with T = {n_steps}, got "
                         f"{getattr(step_noise, 'shape', type(step_noise).__name__)}")
    check_finite("step_noise", step_noise)
    if not bool((step_noise > 0).all()):
        raise ValueError("step_noise: every step's noise std must be > 0")
    return step_noise.to(_WORK)


def check_finite(name: str, values: torch.Tensor) -> None:
    """``ValueError`` naming ``name`` and the first non-finite value's index."""
    finite = torch.isfinite(values) if values.is_floating_point() else torch.ones_like(values, dtype=torch.bool)
    if not finite.all():
        first = tuple(int(i) for i in (~finite).nonzero()[0])
        raise ValueError(f"{name}: non-finite value {values[first].item()} at index {list(first)}")
