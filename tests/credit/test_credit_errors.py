"""Malformed input: a ValueError whose message starts with the offending argument's name, and
nothing modified. Also ``group_ids_from_size`` (DanceGRPO's contiguous layout)."""
from __future__ import annotations

import math
import re

import pytest
import torch

from otca_patch.credit import CreditConfig, compute_credit, group_ids_from_size

B, T, K = 4, 3, 2
SPEC_MODES = ("otca", "moca", "tcd", "multi_grpo", "gdpo", "sum")  # spec section 5


def good_inputs(latent_dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(B, K, generator=gen)
    latents = torch.randn(B, T + 1, 2, 5, generator=gen).to(latent_dtype)
    group_ids = torch.tensor([0, 0, 1, 1])
    return rewards, latents, group_ids


def with_value(tensor, index, value):
    out = tensor.clone()
    out[index] = value
    return out


def _bad_cases():
    """(id, argument name, extra regex the message must contain, builder -> (rewards, latents, ids, config))."""
    return [
        ("rewards-1d", "rewards", r"\[B, K\]", lambda r, l, g: (r[:, 0], l, g, None)),
        ("rewards-3d", "rewards", r"\[B, K\]", lambda r, l, g: (r.unsqueeze(-1), l, g, None)),
        ("rewards-B0", "rewards", r"B = 0", lambda r, l, g: (r[:0], l[:0], g[:0], None)),
        ("rewards-K0", "rewards", r"K = 0", lambda r, l, g: (r[:, :0], l, g, None)),
        ("rewards-nan", "rewards", re.escape("[1, 0]"),
         lambda r, l, g: (with_value(with_value(r, (1, 0), math.nan), (3, 1), math.nan), l, g, None)),
        ("rewards-inf", "rewards", re.escape("[2, 1]"), lambda r, l, g: (with_value(r, (2, 1), -math.inf), l, g, None)),
        ("rewards-ragged", "rewards", r"", lambda r, l, g: ([[1.0, 2.0], [3.0]], l, g, None)),
        ("latents-B-mismatch", "latents", r"3.*4|4.*3", lambda r, l, g: (r, l[:3], g, None)),
        ("latents-one-state", "latents", r"T\+1", lambda r, l, g: (r, l[:, :1], g, None)),
        ("latents-no-steps", "latents", r"T\+1|shape", lambda r, l, g: (r, l[:, :0], g, None)),
        ("latents-1d", "latents", r"shape", lambda r, l, g: (r, l.reshape(-1)[:B], g, None)),
        ("latents-int", "latents", r"float", lambda r, l, g: (r, l.to(torch.int32), g, None)),
        ("latents-not-tensor", "latents", r"Tensor", lambda r, l, g: (r, l.tolist(), g, None)),
        ("latents-empty-state", "latents", r"", lambda r, l, g: (r, l[..., :0], g, None)),
        ("latents-nan", "latents", re.escape("[1, 2, 0, 3]"),
         lambda r, l, g: (r, with_value(with_value(l, (1, 2, 0, 3), math.nan), (3, 0, 0, 0), math.nan), g, None)),
        ("latents-inf-final", "latents", re.escape("[0, 3, 1, 1]"), lambda r, l, g: (r, with_value(l, (0, 3, 1, 1), math.inf), g, None)),
        ("latents-bf16-ninf", "latents", re.escape("[2, 0, 1, 4]"),
         lambda r, l, g: (r, with_value(l.bfloat16(), (2, 0, 1, 4), -math.inf), g, None)),
        ("latents-overflow", "latents", r"overflow|rescale", lambda r, l, g: (r, l.double() * 1e30, g, None)),
        ("group-ids-short", "group_ids", r"\[4\]", lambda r, l, g: (r, l, g[:3], None)),
        ("group-ids-long", "group_ids", r"\[4\]", lambda r, l, g: (r, l, torch.tensor([0, 0, 1, 1, 2]), None)),
        ("group-ids-2d", "group_ids", r"shape", lambda r, l, g: (r, l, g.view(1, 4), None)),
        ("group-ids-float", "group_ids", r"float", lambda r, l, g: (r, l, g.float(), None)),
        ("group-ids-float-list", "group_ids", r"float", lambda r, l, g: (r, l, [0.0, 0.0, 1.0, 1.0], None)),
        ("group-ids-bool", "group_ids", r"bool", lambda r, l, g: (r, l, g.bool(), None)),
        ("objective-weights-length", "objective_weights", r"3.*K = 2|K = 2.*3",
         lambda r, l, g: (r, l, g, CreditConfig(objective_weights=[1.0, 1.0, 1.0]))),
        ("objective-weights-short", "objective_weights", r"K = 2",
         lambda r, l, g: (r, l, g, CreditConfig(objective_weights=[1.0]))),
    ]


BAD_CASES = _bad_cases()


@pytest.mark.parametrize("name,argument,detail,build", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_raises_value_error_naming_the_argument(name, argument, detail, build):
    rewards, latents, group_ids = good_inputs()
    bad = build(rewards, latents, group_ids)
    snapshots = [x.clone() if isinstance(x, torch.Tensor) else x for x in bad[:3]]
    with pytest.raises(ValueError) as info:
        compute_credit(*bad)
    message = str(info.value)
    assert message.startswith(f"{argument}:"), message
    assert re.search(detail, message), f"{message!r} lacks {detail!r}"
    for before, after in zip(snapshots, bad[:3]):  # nothing modified on error (NaN-aware compare)
        if isinstance(before, torch.Tensor):
            assert after.dtype == before.dtype and torch.equal(
                torch.nan_to_num(after.double(), nan=7.25), torch.nan_to_num(before.double(), nan=7.25))


def test_first_offending_index_is_reported_in_row_major_order():
    rewards, latents, group_ids = good_inputs()
    bad = with_value(with_value(latents, (2, 0, 0, 0), math.inf), (1, 3, 1, 4), math.nan)
    with pytest.raises(ValueError, match=re.escape("[1, 3, 1, 4]")):
        compute_credit(rewards, bad, group_ids)


@pytest.mark.parametrize("mode", ["bogus", "OTCA", "", "grpo"])
def test_unknown_mode_lists_the_valid_modes(mode):
    with pytest.raises(ValueError) as info:
        CreditConfig(mode=mode)
    message = str(info.value)
    assert message.startswith("mode:"), message
    for valid in SPEC_MODES:
        assert valid in message, f"{valid} not listed in {message!r}"


@pytest.mark.parametrize("kwargs,argument", [
    ({"w_min": -0.1}, "w_min"), ({"w_min": 1.0001}, "w_min"), ({"w_min": math.nan}, "w_min"),
    ({"w_min": math.inf}, "w_min"), ({"explore": -1e-9}, "explore"), ({"explore": math.nan}, "explore"),
    ({"objective_weights": [1.0, -0.5]}, "objective_weights"),
    ({"objective_weights": [1.0, math.nan]}, "objective_weights"),
    ({"objective_weights": []}, "objective_weights"),
])
def test_bad_config_raises_value_error_naming_the_option(kwargs, argument):
    with pytest.raises(ValueError, match=f"^{argument}:"):
        CreditConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [{"w_min": 0.0}, {"w_min": 1.0}, {"explore": 0.0}, {"objective_weights": [0.0, 2.0]}])
def test_boundary_config_values_are_accepted(kwargs):
    rewards, latents, group_ids = good_inputs()
    credit = compute_credit(rewards, latents, group_ids, CreditConfig(**kwargs))
    assert bool(torch.isfinite(credit.advantages).all())


def test_a_group_of_one_and_a_constant_group_are_not_errors():
    rewards, latents, _ = good_inputs()
    rewards[1:3] = 3.0  # group 5: constant rewards
    credit = compute_credit(rewards, latents, [4, 5, 5, 6])
    assert credit.objective_advantages.abs().max() == 0  # groups of one (4, 6) and a constant group (5)
    assert credit.advantages.abs().max() == 0
    assert bool(torch.isfinite(credit.advantages).all())


# ----------------------------------------------------------------------------- group_ids_from_size


@pytest.mark.parametrize("batch,size,expected", [
    (6, 3, [0, 0, 0, 1, 1, 1]), (4, 1, [0, 1, 2, 3]), (4, 4, [0, 0, 0, 0]), (6, 2, [0, 0, 1, 1, 2, 2]),
])
def test_group_ids_from_size_is_contiguous(batch, size, expected):
    ids = group_ids_from_size(batch, size)
    assert ids.dtype == torch.int64
    assert ids.tolist() == expected
    # DanceGRPO's layout: what repeat_interleave of the prompt index gives.
    assert ids.tolist() == [i // size for i in range(batch)]


@pytest.mark.parametrize("batch,size,argument", [
    (6, 0, "group_size"), (6, -2, "group_size"), (5, 2, "batch_size"), (0, 2, "batch_size"), (-4, 2, "batch_size"),
])
def test_group_ids_from_size_rejects_bad_sizes(batch, size, argument):
    with pytest.raises(ValueError, match=f"^{argument}:"):
        group_ids_from_size(batch, size)


def test_group_ids_from_size_feeds_compute_credit():
    rewards, latents, _ = good_inputs()
    by_helper = compute_credit(rewards, latents, group_ids_from_size(B, 2))
    by_hand = compute_credit(rewards, latents, [0, 0, 1, 1])
    torch.testing.assert_close(by_helper.advantages, by_hand.advantages, atol=0, rtol=0)
