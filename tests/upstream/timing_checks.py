"""What the smoke tests of the objective-timing probe share (docs/credit.md 9.3): the probe flags of a
tiny run, and the credit of a record recomputed by the independent float64 reference from the map
the record logged."""
import sys
from pathlib import Path

import numpy as np

from otca_patch.rehearsal.credit_check import logged_timing_map

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "credit"))
from test_credit_timing_option import reference_timing_weights  # noqa: E402  the independent float64 reference

#: a probe at every training step over a process's whole rollout (4 samples, one prompt group), 2
#: probes pooled: from step 2 on each step's credit uses a map
PROBE = ["--otca", "--otca_objective_timing", "probe", "--otca_probe_every", "1", "--otca_probe_samples", "4",
         "--otca_probe_window", "2"]
TOLERANCE = 1e-5  # float32 advantages logged by the trainer against the float64 reference


def assert_otca_credit_follows_the_logged_map(record: dict, steps=None) -> None:
    """Mode ``otca``: the trained advantages are ``w[i, t] sum_k W[k, t] mixture[i, k] A[i, k]`` (9.3
    items 4-5) with ``W`` the reference's weights of the logged map, and differ from the mode's own
    rule (the map mattered). ``steps [B, n]``: the step each logged column trains (default: the
    leading columns)."""
    weights = reference_timing_weights(logged_timing_map(record).tolist(), record["config"]["timing_floor"])
    parts = np.array(record["mixture"]) * np.array(record["objective_advantages"])
    per_step = np.array(record["step_weights"])
    logged = np.array(record["advantages"])
    columns = np.arange(logged.shape[1])[None].repeat(logged.shape[0], 0) if steps is None else np.array(steps)
    expected = np.take_along_axis(per_step * (parts @ weights), columns, axis=1)
    np.testing.assert_allclose(logged, expected, atol=TOLERANCE, rtol=0)
    untimed = np.take_along_axis(per_step * parts.sum(1, keepdims=True), columns, axis=1)
    assert np.abs(untimed - logged).max() > 100 * TOLERANCE
