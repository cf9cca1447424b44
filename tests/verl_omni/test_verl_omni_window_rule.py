"""The window rule of docs/credit.md section 10: TCD over VeRL-Omni's SDE window, its last state standing
in for the final one. The engine (through the plug-in's ``window_progress``) against an independent float64
reference written here in plain loops, and the documented conformance vectors against that reference."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from otca_patch.credit import tcd
from otca_patch.verl_omni import batch

pytestmark = pytest.mark.upstream

W_MIN, EPS = 0.5, 1e-6
#: docs/credit.md 10, "Conformance vectors of the window rule": (states, S, dS, w)
DOCUMENTED = [
    ([(0.8, 0.6), (0.6, 0.8), (0.28, 0.96)], [0.8, 0.936, 1.0], [0.136, 0.064], [1.1799982000, 0.8200018000]),
    ([(0.0, 1.0), (1.0, 0.0), (0.6, 0.8)], [0.8, 0.6, 1.0], [-0.2, 0.4], [0.5000025000, 1.4999975000]),
]


def reference(states):
    """S, dS and w of one window in float64, from section 1 with the window's last state as the final one."""
    final = states[-1]
    norm = lambda v: math.sqrt(sum(x * x for x in v))  # noqa: E731
    similarity = [sum(a * b for a, b in zip(z, final)) / max(norm(z) * norm(final), 1e-12) for z in states]
    progress = [similarity[t] - similarity[t - 1] for t in range(1, len(states))]
    positive = [max(0.0, d) + EPS for d in progress]
    weights = [W_MIN + (1 - W_MIN) * len(progress) * p / sum(positive) for p in positive]
    return similarity, progress, weights


@pytest.mark.parametrize("states, similarity, progress, weights", DOCUMENTED)
def test_documented_vectors_are_the_reference(states, similarity, progress, weights):
    got = reference(states)
    for computed, documented in zip(got, (similarity, progress, weights)):
        assert computed == pytest.approx(documented, abs=1e-9)


def test_engine_over_a_window_equals_the_reference():
    generator = torch.Generator().manual_seed(3)
    trajectory = torch.randn(4, 6, 2, 3, generator=generator, dtype=torch.float64)  # B=4, T=5 steps
    start, width = 1, 3  # states 1..4 of 0..5: the window ends before the trajectory
    window = trajectory[:, start:start + width + 1]
    data = SimpleNamespace(batch={batch.LATENTS: window.float()})
    delta_s = batch.window_progress(data, width)
    weights = tcd.step_weights(tcd.step_share(delta_s, EPS), W_MIN)
    for sample in range(4):
        states = [tuple(window[sample, t].flatten().tolist()) for t in range(width + 1)]
        _, progress, expected = reference(states)
        assert delta_s[sample].tolist() == pytest.approx(progress, abs=1e-6)
        assert weights[sample].tolist() == pytest.approx(expected, abs=1e-5)
    # the whole trajectory's last state is not the window's: the rule changes the progress
    whole = tcd.step_progress(tcd.similarity_to_final(trajectory.float()))[:, start:start + width]
    assert (whole - delta_s.float()).abs().max() > 1e-3


def test_a_window_that_does_not_fit_the_trained_steps_is_refused():
    data = SimpleNamespace(batch={batch.LATENTS: torch.zeros(2, 4, 3)})
    with pytest.raises(ValueError, match=r"all_latents has shape \(2, 4, 3\).*5 trained steps"):
        batch.window_progress(data, 5)
