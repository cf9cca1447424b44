"""Spec conformance: every case of ``conformance/credit_cases.json`` matches within 1e-5 absolute.

The vectors were computed in float64 from the rules of ``otca-spec.md`` by an independent
generator; an implementation conforms when every section-6 quantity of every case lies within
1e-5 of them (float32 compute).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from otca_patch.credit import CreditConfig, compute_credit

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = REPO_ROOT.parent / "shared" / "conformance" / "credit_cases.json"
CASES_PATH = Path(os.environ.get("OTCA_CONFORMANCE", DEFAULT_CASES))
TOLERANCE = 1e-5
#: Spec section 6, by name and shape (in terms of B, T, K).
QUANTITIES = {
    "similarity": ("B", "T+1"), "delta_s": ("B", "T"), "step_share": ("B", "T"),
    "step_weights": ("B", "T"), "objective_advantages": ("B", "K"), "trajectory_score": ("B",),
    "lambdas": ("B",), "mixture": ("B", "K"), "combined": ("B",), "advantages": ("B", "T"),
}


def _load_cases():
    if not CASES_PATH.is_file():
        return []
    with CASES_PATH.open() as handle:
        return json.load(handle)


CASES = _load_cases()


def _missing_reason() -> str:
    return (f"conformance vectors not found at {CASES_PATH} "
            "(expected <repo>/../shared/conformance/credit_cases.json or $OTCA_CONFORMANCE)")


def test_conformance_file_is_present_and_complete():
    if not CASES_PATH.is_file():
        pytest.skip(_missing_reason())
    assert CASES, f"{CASES_PATH} holds no cases"
    names = [case["name"] for case in CASES]
    assert len(set(names)) == len(names), "case names must be unique (they are the test ids)"
    for case in CASES:
        assert set(QUANTITIES) <= set(case["expected"]), f"{case['name']}: missing expected quantities"
    # Every mode of the spec's table is covered by at least one case.
    assert {case["config"]["mode"] for case in CASES} >= {"otca", "moca", "tcd", "multi_grpo", "gdpo", "sum"}


@pytest.mark.parametrize("case", CASES or [None], ids=[c["name"] for c in CASES] or ["no-cases"])
def test_case_matches_expected(case):
    if case is None:
        pytest.skip(_missing_reason())
    config = CreditConfig(**case["config"])
    rewards = torch.tensor(case["rewards"], dtype=torch.float64)
    latents = torch.tensor(case["latents"], dtype=torch.float64)
    group_ids = torch.tensor(case["group_ids"], dtype=torch.int64)
    batch, n_states = latents.shape[0], latents.shape[1]
    sizes = {"B": batch, "T": n_states - 1, "T+1": n_states, "K": rewards.shape[1]}

    credit = compute_credit(rewards, latents, group_ids, config)

    assert credit.mode == case["config"]["mode"]
    failures = []
    for name, dims in QUANTITIES.items():
        got = getattr(credit, name)
        expected = torch.tensor(case["expected"][name], dtype=torch.float64)
        assert tuple(got.shape) == tuple(sizes[d] for d in dims), f"{name}: shape {tuple(got.shape)}"
        assert tuple(expected.shape) == tuple(got.shape), f"{name}: vector shape {tuple(expected.shape)}"
        assert got.dtype == torch.float32, f"{name}: dtype {got.dtype}"
        error = (got.double() - expected).abs()
        if not bool(torch.isfinite(got).all()) or float(error.max()) > TOLERANCE:
            where = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
            failures.append(f"{name}: max |error| {float(error.max()):.3g} at {list(where)} "
                            f"(got {float(got.double()[where]):.8g}, expected {float(expected[where]):.8g})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("case", CASES[:4] or [None], ids=[c["name"] for c in CASES[:4]] or ["no-cases"])
def test_case_matches_with_float32_inputs_and_tiny_chunks(case):
    """The same vectors from float32 inputs and with one step per similarity chunk."""
    if case is None:
        pytest.skip(_missing_reason())
    credit = compute_credit(
        torch.tensor(case["rewards"], dtype=torch.float32), torch.tensor(case["latents"], dtype=torch.float32),
        case["group_ids"], CreditConfig(**case["config"]), chunk_bytes=1,
    )
    for name in QUANTITIES:
        expected = torch.tensor(case["expected"][name], dtype=torch.float64)
        torch.testing.assert_close(getattr(credit, name).double(), expected, atol=TOLERANCE, rtol=0, msg=name)
