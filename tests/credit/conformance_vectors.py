"""Checks shared by the conformance-vector tests of the credit options: the stored JSON is its
independent reference's output, and the engine reproduces every expected quantity."""
from __future__ import annotations

import json

import numpy as np
import torch


def assert_vectors_are_the_references(generated: list, stored: list) -> None:
    """``generated``: the reference's cases, made afresh; ``stored``: the repository's JSON."""
    regenerated = json.loads(json.dumps(generated))
    assert [c["name"] for c in regenerated] == [c["name"] for c in stored]
    for new, old in zip(regenerated, stored):
        for name, values in new["expected"].items():
            assert np.allclose(values, old["expected"][name], atol=1e-12, rtol=0), (new["name"], name)


def assert_engine_conforms(credit, case: dict, tolerance: float) -> None:
    """Every quantity of ``case["expected"]`` is ``credit``'s within ``tolerance`` (absolute)."""
    for name, values in case["expected"].items():
        expected = torch.tensor(values, dtype=torch.float64)
        got = getattr(credit, name).double()
        assert got.shape == expected.shape, name
        assert (got - expected).abs().max() < tolerance, (case["name"], name)
