"""Spec conformance: every case of the public vector files matches within 1e-5 absolute.

The vectors (``tests/data/conformance/``, vendored from the spec's ``conformance/`` folder so a bare
clone runs them) were computed in float64 from the rules of ``docs/credit.md`` by an independent
generator: ``credit_cases.json`` the default rules, ``credit_options_cases.json`` the options
``weight_scope``, ``explore_center`` and ``fusion``. An implementation conforms when every
section-6 quantity of every case lies within 1e-5 of them (float32 compute); for ``fusion="group"``
the mixture need not be unique, so it conforms when it lies on the simplex and reproduces
``combined``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from upstream_snapshots import missing, shared_dir

from otca_patch.credit import CreditConfig, compute_credit

TESTS = Path(__file__).resolve().parents[1]
VENDORED = TESTS / "data" / "conformance"
#: The spec's own folder beside the repository (or $OTCA_SHARED), where a development checkout and CI have it.
SHARED = shared_dir() / "conformance"
FILES = ("credit_cases.json", "credit_options_cases.json")
TOLERANCE = 1e-5
#: Spec section 6, by name and shape (in terms of B, T, K).
QUANTITIES = {
    "similarity": ("B", "T+1"), "delta_s": ("B", "T"), "step_share": ("B", "T"),
    "step_weights": ("B", "T"), "objective_advantages": ("B", "K"), "trajectory_score": ("B",),
    "lambdas": ("B",), "mixture": ("B", "K"), "combined": ("B",), "advantages": ("B", "T"),
}
OPTIONS = {"weight_scope": {"sample", "batch"}, "explore_center": {False, True}, "fusion": {"sample", "group"}}


def _load(name: str) -> list:
    with (VENDORED / name).open() as handle:
        return json.load(handle)


CASES = {name: _load(name) for name in FILES}
ALL_CASES = [(name, case) for name in FILES for case in CASES[name]]
IDS = [f"{name.split('.')[0]}:{case['name']}" for name, case in ALL_CASES]


def _inputs(case, dtype=torch.float64):
    return (torch.tensor(case["rewards"], dtype=dtype), torch.tensor(case["latents"], dtype=dtype),
            torch.tensor(case["group_ids"], dtype=torch.int64))


def case_errors(case, credit) -> dict:
    """Worst absolute error of each section-6 quantity against the case's expected values."""
    errors = {}
    group_fusion = case["config"].get("fusion") == "group"
    for name in QUANTITIES:
        if getattr(credit, name) is None:  # similarity, when built from delta_s alone
            continue
        got = getattr(credit, name).double()
        expected = torch.tensor(case["expected"][name], dtype=torch.float64)
        assert tuple(expected.shape) == tuple(got.shape), f"{name}: shape {tuple(got.shape)}, vector {tuple(expected.shape)}"
        if name == "mixture" and group_fusion:
            # any minimiser conforms: on the simplex, and reproducing combined
            off_simplex = max(float((-got).clamp(min=0).max()), float((got.sum(-1) - 1).abs().max()))
            reproduced = (got * credit.objective_advantages.double()).sum(-1)
            errors[name] = max(off_simplex, float((reproduced - torch.tensor(case["expected"]["combined"])).abs().max()))
        else:
            errors[name] = float((got - expected).abs().max()) if bool(torch.isfinite(got).all()) else float("inf")
    return errors


@pytest.mark.parametrize("name", FILES)
def test_vector_file_is_complete(name):
    cases = CASES[name]
    assert cases, f"{name} holds no cases"
    names = [case["name"] for case in cases]
    assert len(set(names)) == len(names), "case names must be unique (they are the test ids)"
    for case in cases:
        assert set(QUANTITIES) <= set(case["expected"]), f"{case['name']}: missing expected quantities"
    if name == "credit_cases.json":  # every mode of the spec's table is covered
        assert {case["config"]["mode"] for case in cases} >= {"otca", "moca", "tcd", "multi_grpo", "gdpo", "sum"}
    else:  # every value of every option is covered
        for option, values in OPTIONS.items():
            seen = {case["config"].get(option, CreditConfig.__dataclass_fields__[option].default) for case in cases}
            assert seen >= values, f"{option}: only {seen} covered"


@pytest.mark.parametrize("name", FILES)
def test_vendored_vectors_equal_the_specs_own(name):
    """Where the spec's folder is beside the repository, the vendored copy is that file, unchanged."""
    original = SHARED / name
    if not original.is_file():
        missing(f"{original} not present (a bare clone): the vendored copy is the reference")
    assert (VENDORED / name).read_bytes() == original.read_bytes(), f"re-vendor {original} into {VENDORED}"


@pytest.mark.parametrize("name,case", ALL_CASES, ids=IDS)
def test_case_matches_expected(name, case):
    config = CreditConfig(**case["config"])
    rewards, latents, group_ids = _inputs(case)
    sizes = {"B": latents.shape[0], "T": latents.shape[1] - 1, "T+1": latents.shape[1], "K": rewards.shape[1]}

    credit = compute_credit(rewards, latents, group_ids, config)

    assert credit.mode == case["config"]["mode"]
    for quantity, dims in QUANTITIES.items():
        got = getattr(credit, quantity)
        assert tuple(got.shape) == tuple(sizes[d] for d in dims), f"{quantity}: shape {tuple(got.shape)}"
        assert got.dtype == torch.float32, f"{quantity}: dtype {got.dtype}"
    errors = case_errors(case, credit)
    failures = {q: e for q, e in errors.items() if not e <= TOLERANCE}
    assert not failures, f"max |error| above {TOLERANCE}: {failures}"


@pytest.mark.parametrize("name,case", ALL_CASES[:4] + ALL_CASES[-4:], ids=IDS[:4] + IDS[-4:])
def test_case_matches_with_float32_inputs_and_tiny_chunks(name, case):
    """The same vectors from float32 inputs and with one step per similarity chunk."""
    rewards, latents, group_ids = _inputs(case, torch.float32)
    credit = compute_credit(rewards, latents, group_ids.tolist(), CreditConfig(**case["config"]), chunk_bytes=1)
    errors = case_errors(case, credit)
    assert max(errors.values()) <= TOLERANCE, errors


@pytest.mark.parametrize("name,case", [c for c in ALL_CASES if c[1]["config"].get("fusion") == "group"],
                         ids=[i for i, c in zip(IDS, ALL_CASES) if c[1]["config"].get("fusion") == "group"])
def test_group_fusion_from_progress_matches_too(name, case):
    """``credit_from_progress`` (the multi-rank path) conforms with the options as well."""
    from otca_patch.credit import credit_from_progress

    rewards, _, group_ids = _inputs(case)
    delta_s = torch.tensor(case["expected"]["delta_s"], dtype=torch.float64)
    credit = credit_from_progress(rewards, delta_s, group_ids, CreditConfig(**case["config"]))
    errors = case_errors(case, credit)
    assert "similarity" not in errors and max(errors.values()) <= TOLERANCE, errors
