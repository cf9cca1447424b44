"""The objective-timing probe of a trainer (docs/credit.md 9.3): on a schedule, the predicted clean
samples of a few rollouts' every step are kept, decoded as upstream decodes its final sample and
scored with each objective; their within-group moments against the final scores, pooled over the
last W probes, are the map ``decided [K, T]`` that ``--otca_objective_timing probe`` spreads each
objective's credit by.

Family-independent: a target's sampler hands each step's prediction (``keep``), its decoding hook
hands upstream's decoder (``score``), and ``Runtime.credit`` asks for the map before the credit
(``map_for_credit``) and measures this step's probe after it (``measure``), over all ranks.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import fields
from typing import Callable, Optional, Sequence

import torch

from ..credit.timing import TimingMoments, decided_from_moments, timing_moments
from .distributed import gather_rows, world
from ..target_options import TargetOptions

#: the probe's flags and the smallest value each takes
FLAG_MINIMA = {"otca_probe_every": 1, "otca_probe_samples": 2, "otca_probe_window": 1}
DEFAULTS = {f.name: f.default for f in fields(TargetOptions) if f.name in FLAG_MINIMA}


class TimingProbe:
    """One rank's probe: the schedule, the probed samples of the current step and the pooled moments."""

    def __init__(self, config):
        self.active = config.credit_config().uses_timing_map
        for name, least in FLAG_MINIMA.items():
            value = getattr(config, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"--{name}: needs an integer >= {least}, got {value!r}")
            if not self.active and value != DEFAULTS[name]:
                raise ValueError(f"--{name}: schedules the objective-timing probe, which runs only with "
                                 "--otca_objective_timing probe")
        self.every, self.samples = config.otca_probe_every, config.otca_probe_samples
        #: (moments, measured [K] bool) of the last W probes, oldest first
        self.window: deque = deque(maxlen=config.otca_probe_window)
        self.start_step(1)

    def start_step(self, step: int) -> None:
        """Training step ``step`` (1-based) begins: probed are steps 1, 1 + N, 1 + 2N, ..."""
        self.probing = self.active and (step - 1) % self.every == 0
        self.pending: list = []  # [b, ...] predictions of the current chunk's steps, in step order
        self.scores: list = []  # [b, K, T] per scored chunk
        self.rolled_out = 0  # samples of this step's rollout whose first step was seen
        self.chunk_start = 0  # the rollout position of the chunk being sampled
        self.seconds = 0.0
        self.used_map: Optional[torch.Tensor] = None
        self.used_dof = 0
        self.new_map: Optional[torch.Tensor] = None

    # ---- during the rollout (sampler hooks)
    def keep(self, prediction: torch.Tensor, index: int) -> None:
        """Step ``index``'s (0-based) predicted clean sample ``[b, ...]`` of the chunk being sampled;
        kept for the first ``--otca_probe_samples`` samples of the rollout."""
        if not self.probing:
            return
        started = time.perf_counter()
        if index == 0:
            self.chunk_start = self.rolled_out
            self.rolled_out += prediction.shape[0]
        wanted = min(self.samples - self.chunk_start, prediction.shape[0])
        if wanted > 0:
            self.pending.append(prediction[:wanted].detach().clone())
        self.seconds += time.perf_counter() - started

    def score(self, decode: Callable, prompts: Sequence[str], objectives, frames: int = 1,
              upstream: Optional[Callable] = None) -> None:
        """Decode the kept predictions of the chunk just sampled (``decode``: upstream's decoding of a
        ``[n, ...]`` batch of predicted clean samples into what its reward takes, one step at a time)
        and score them with every objective: ``[b, K, T]``. Registry objectives score the decoded
        samples; upstream's rewards, where the target can call them, are ``upstream(samples, rows)``
        (``rows``: each sample's position in the chunk, to pick its prompt) -> what the trainer
        computes (a ``[n]`` tensor or a dictionary of them, read as ``Objectives.matrix`` reads the
        trainer's own); an objective the probe cannot call gets NaN."""
        if not self.pending:
            return
        started = time.perf_counter()
        count = self.pending[0].shape[0]
        with torch.inference_mode():
            decoded = [decode(prediction) for prediction in self.pending]  # T lists of b samples
        steps = len(decoded)
        samples = [decoded[t][i] for i in range(count) for t in range(steps)]  # sample-major
        chunk_prompts = [prompts[i] for i in range(count) for _ in range(steps)]
        scores = objectives.registry_matrix(samples, chunk_prompts, frames).float().cpu()
        if upstream is not None and objectives.keys:
            with torch.inference_mode():
                own = upstream(samples, [i for i in range(count) for _ in range(steps)])
            for name, key in objectives.keys.items():
                scores[:, objectives.names.index(name)] = objectives.upstream.read(own, key, name).cpu()
        self.scores.append(scores.view(count, steps, -1).transpose(1, 2))
        self.pending = []
        self.seconds += time.perf_counter() - started

    # ---- at the credit (Runtime.credit, on every rank)
    def map_for_credit(self) -> Optional[torch.Tensor]:
        """``[K, T]`` float64 pooled over the window (NaN rows: objectives not measured), or None
        before the first probe; kept as the map this step's credit used."""
        if not self.window:
            return None
        self.used_map, self.used_dof = self._pooled()
        return self.used_map

    def _pooled(self) -> tuple[torch.Tensor, int]:
        """The map of the window's summed moments (NaN rows: objectives some probe could not score)
        and its within-group degrees of freedom."""
        moments = self.window[0][0]
        for later, _ in list(self.window)[1:]:
            moments = moments + later
        measured = torch.stack([m for _, m in self.window]).all(0)
        decided = decided_from_moments(moments)
        return torch.where(measured.unsqueeze(1), decided, torch.full_like(decided, math.nan)), moments.dof

    def measure(self, final_scores: torch.Tensor, group_ids: torch.Tensor, per_rank: int) -> None:
        """Add this step's probe to the window: ``final_scores [N, K]`` and ``group_ids [N]`` of the
        gathered batch (rank-major, ``per_rank`` rows each). A collective: every rank calls it."""
        if not self.probing:
            return
        started = time.perf_counter()
        expected = min(self.samples, per_rank)
        local = torch.cat(self.scores) if self.scores else torch.empty(0)
        if local.shape[0] != expected:
            raise RuntimeError(f"objective-timing probe: {local.shape[0]} probed samples scored on this rank, "
                               f"expected {expected} (--otca_probe_samples {self.samples}, {per_rank} rollouts); "
                               "the sampler hooks no longer match this trainer")
        step_scores = gather_rows(local.to(final_scores.device, torch.float64))
        _, size = world()
        rows = (torch.arange(size).unsqueeze(1) * per_rank + torch.arange(expected)).flatten().to(final_scores.device)
        groups = group_ids[rows]
        if not bool((torch.unique(groups, return_counts=True)[1] >= 2).any()):
            raise ValueError(f"--otca_probe_samples {self.samples}: the probed samples hold no two of one prompt "
                             "group, so no within-group variation can be measured; probe whole groups")
        measured = torch.isfinite(step_scores).all(2).all(0).cpu()
        step_scores = torch.nan_to_num(step_scores, nan=0.0) * measured.to(step_scores.device)[None, :, None]
        moments = timing_moments(step_scores, final_scores[rows].double(), groups)
        self.window.append((_on_cpu(moments), measured))
        self.new_map = self._pooled()[0]
        self.seconds += time.perf_counter() - started

    def record_fields(self) -> dict:
        """The run-log fields of the probe (docs/run-log.md): the map this step's credit used."""
        if not self.active:
            return {}
        return {"objective_timing": _nullable(self.used_map), "objective_timing_dof": self.used_dof,
                "probe": self.probing, "probe_seconds": self.seconds}


def heatmap(decided: torch.Tensor, cell: int = 16) -> "torch.Tensor":
    """``[K * cell, T * cell, 3]`` uint8: the map as an image (rows objectives, columns steps 1..T; dark
    = undecided, bright = decided, grey = undefined) for wandb."""
    values = decided.double()
    shade = (values.clamp(0, 1) * 255).round().to(torch.uint8)
    image = torch.stack([shade // 4, shade, shade // 2 + 64], dim=-1)  # dark blue to green
    image[torch.isnan(values)] = torch.tensor([128, 128, 128], dtype=torch.uint8)
    return image.repeat_interleave(cell, 0).repeat_interleave(cell, 1)


def _on_cpu(moments: TimingMoments) -> TimingMoments:
    return TimingMoments(moments.cross.cpu(), moments.step_square.cpu(), moments.final_square.cpu(), moments.dof)


def _nullable(value: Optional[torch.Tensor]):
    if value is None:
        return None
    return [[None if math.isnan(v) else v for v in row] for row in value.tolist()]
