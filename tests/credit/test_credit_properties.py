"""Property tests of the credit engine (spec sections 1-5), with hypothesis.

Every reference here (cosine similarity, vanilla group advantage) is computed independently in
float64 in this file; nothing is copied from the code under test. Data comes in two styles:
``continuous`` (normal draws: no ties with probability one) and ``discrete`` (rewards from a few
values, so ties, constant groups and zero latents occur). Properties that involve an argmin /
argmax over objectives or the sign of ``mean_k A`` (both discontinuous) only use continuous data
when the two computations being compared may round differently.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from otca_patch.credit import CreditConfig, compute_credit, modes, similarity_to_final

QUANTITIES = ("similarity", "delta_s", "step_share", "step_weights", "objective_advantages",
              "trajectory_score", "lambdas", "mixture", "combined", "advantages")
PER_SAMPLE = QUANTITIES  # every section-6 quantity has the sample on dim 0

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=False)


# ----------------------------------------------------------------------------- data


@st.composite
def batches(draw, style=None, n_objectives=None, min_group_size=1, max_group_size=5):
    """A batch: rewards float64 [B, K], latents float32 [B, T+1, D], group_ids int64 [B]."""
    style = style or draw(st.sampled_from(["continuous", "discrete"]))
    n_groups = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(min_group_size, max_group_size), min_size=n_groups, max_size=n_groups))
    k = n_objectives if n_objectives is not None else draw(st.integers(1, 4))
    n_steps = draw(st.integers(1, 6))
    dim = draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**31 - 1))
    shuffle = draw(st.booleans())
    labels = draw(st.lists(st.integers(-10**6, 10**6), min_size=n_groups, max_size=n_groups, unique=True))
    scale = 10.0 ** draw(st.floats(-2, 2))

    gen = torch.Generator().manual_seed(seed)
    group_ids = torch.tensor([labels[g] for g, size in enumerate(sizes) for _ in range(size)], dtype=torch.int64)
    batch = group_ids.shape[0]
    if shuffle:
        group_ids = group_ids[torch.randperm(batch, generator=gen)]
    if style == "continuous":
        rewards = torch.randn(batch, k, generator=gen, dtype=torch.float64) * 3 + 1
    else:
        values = torch.tensor([0.0, 0.5, 1.0, 2.5], dtype=torch.float64)
        rewards = values[torch.randint(0, 4, (batch, k), generator=gen)]
    # A noisy interpolation from noise (sigma = 1) to a sample (sigma = 0), as a flow sampler makes.
    sample = torch.randn(batch, 1, dim, generator=gen)
    noise = torch.randn(batch, n_steps + 1, dim, generator=gen)
    sigma = torch.linspace(1, 0, n_steps + 1).view(1, -1, 1)
    jitter = 0.3 * torch.randn(batch, n_steps + 1, dim, generator=gen)
    latents = ((1 - sigma) * sample + sigma * noise + sigma * (1 - sigma) * jitter) * scale
    if style == "discrete":
        zero = torch.rand(batch, n_steps + 1, generator=gen) < 0.15
        latents[zero] = 0.0
    return {"rewards": rewards, "latents": latents, "group_ids": group_ids, "style": style}


def property_modes() -> tuple:
    """The registered modes that run on rewards and progress alone (no declared input), read from the
    registry when drawn: a mode registered later is drawn too."""
    return tuple(name for name in modes.names() if not modes.get(name).needs)


@st.composite
def configs(draw):
    return CreditConfig(mode=draw(st.sampled_from(property_modes())),
                        w_min=draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1))),
                        explore=draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 3))))


def run(data, config=None, **kwargs):
    return compute_credit(data["rewards"], data["latents"], data["group_ids"], config or CreditConfig(), **kwargs)


def close(a, b, atol, rtol=0.0, msg=""):
    torch.testing.assert_close(a.double(), b.double(), atol=atol, rtol=rtol, msg=msg or None)


# ----------------------------------------------------------------------------- references


def reference_similarity(latents: torch.Tensor) -> torch.Tensor:
    """Unchunked cosine to the final state, float64, zero norm -> 0 (spec 1.1)."""
    flat = latents.double().reshape(latents.shape[0], latents.shape[1], -1)
    final = flat[:, -1:, :]
    dots = (flat * final).sum(-1)
    norms = flat.pow(2).sum(-1).sqrt() * final.pow(2).sum(-1).sqrt()
    return dots / norms.clamp(min=1e-12)


def reference_vanilla(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """DanceGRPO's group advantage ``(r - mean) / (std + 1e-8)`` with ``torch.std``, group by group."""
    out = torch.zeros_like(rewards, dtype=torch.float64)
    for label in set(group_ids.tolist()):
        members = group_ids == label
        values = rewards[members].double()
        if values.numel() > 1:  # spec 2: a group of one sample gives 0 (torch.std would be nan)
            out[members] = (values - values.mean()) / (values.std() + 1e-8)
    return out


# ----------------------------------------------------------------------------- TCD


@SETTINGS
@given(data=batches(), config=configs())
def test_step_weights_have_mean_one_and_floor_w_min(data, config):
    credit = run(data, config)
    n_steps = data["latents"].shape[1] - 1
    weights, share = credit.step_weights, credit.step_share
    close(weights.mean(dim=-1), torch.ones(weights.shape[0]), atol=1e-5, msg="mean over steps")
    # w >= w_min holds exactly in float64; rounding to float32 is monotone, so compare to fl32(w_min).
    assert bool((weights >= torch.tensor(config.w_min, dtype=torch.float32)).all())
    assert bool((share > 0).all())
    close(share.sum(dim=-1), torch.ones(share.shape[0]), atol=1e-6, msg="shares sum to 1")
    # Steps are ordered as their shares: a larger share never gets a smaller weight.
    larger = share.unsqueeze(-1) > share.unsqueeze(-2) + 1e-6
    heavier = weights.unsqueeze(-1) >= weights.unsqueeze(-2)
    assert bool(heavier[larger].all())
    # At most T times the mean: the weight of a step that made all the progress.
    assert bool((weights <= 1 + (1 - config.w_min) * (n_steps - 1) + 1e-5).all())


@SETTINGS
@given(data=batches(), chunk_fraction=st.floats(0, 1.2))
def test_chunked_similarity_equals_direct_cosine(data, chunk_fraction):
    latents = data["latents"]
    batch, n_states = latents.shape[0], latents.shape[1]
    step_bytes = batch * latents[0, 0].numel() * 4
    # From 1 byte (one step per chunk) to more than the whole trajectory (one chunk).
    chunk_bytes = max(1, int(chunk_fraction * (n_states + 1) * step_bytes))
    expected = reference_similarity(latents)
    got = similarity_to_final(latents, chunk_bytes=chunk_bytes)
    assert got.dtype == torch.float32 and tuple(got.shape) == (batch, n_states)
    close(got, expected, atol=1e-5)
    close(run(data, chunk_bytes=chunk_bytes).similarity, expected, atol=1e-5)
    # S[i, T] = 1 unless the final state is zero, in which case the whole row is 0 (spec 1.1).
    final_zero = (latents[:, -1].reshape(batch, -1) == 0).all(dim=-1)
    close(got[:, -1], torch.where(final_zero, 0.0, 1.0), atol=1e-6)


@SETTINGS
@given(data=batches(), n_chunks=st.integers(1, 5))
def test_one_step_chunks_equal_one_big_chunk(data, n_chunks):
    latents = data["latents"]
    tiny = similarity_to_final(latents, chunk_bytes=1)
    whole = similarity_to_final(latents, chunk_bytes=1 << 30)
    some = similarity_to_final(latents, chunk_bytes=n_chunks * latents.shape[0] * latents[0, 0].numel() * 4)
    close(tiny, whole, atol=1e-6)
    close(some, whole, atol=1e-6)


# ----------------------------------------------------------------------------- MOCA


@SETTINGS
@given(data=batches(), config=configs())
def test_mixture_on_simplex_and_reproduces_combined(data, config):
    credit = run(data, config)
    mixture, adv = credit.mixture.double(), credit.objective_advantages.double()
    assert bool((mixture >= 0).all())
    close(mixture.sum(dim=-1), torch.ones(mixture.shape[0]), atol=1e-6, msg="mixture sums to 1")
    lambdas = credit.lambdas.double()
    assert bool((lambdas >= 0).all()) and bool((lambdas <= config.explore + 1e-6).all())
    # Spec 3.3: no exploration bias unless the aggregated advantage is positive.
    assert bool((lambdas[adv.mean(dim=-1) <= -1e-6] == 0).all())
    fused = (lambdas / 2).clamp(min=adv.min(dim=-1).values).clamp(max=adv.max(dim=-1).values)
    close((mixture * adv).sum(dim=-1), fused, atol=1e-5, msg="mixture @ A")
    if modes.get(config.mode).fuses:
        close(credit.combined, fused, atol=1e-5, msg="combined = clip(lambda / 2, min A, max A)")
        close((mixture * adv).sum(dim=-1), credit.combined.double(), atol=1e-5, msg="mixture @ A == combined")


@SETTINGS
@given(data=batches(), config=configs())
def test_step_constant_when_uniform_weights_or_broadcast_mode(data, config):
    credit = run(data, config)
    n_steps = data["latents"].shape[1] - 1
    broadcast = credit.combined.unsqueeze(-1).expand(-1, n_steps)
    if not modes.get(config.mode).step_weighted:
        close(credit.advantages, broadcast, atol=1e-6)
    uniform = run(data, CreditConfig(mode=config.mode, w_min=1.0, explore=config.explore))
    assert bool((uniform.step_weights == 1).all())
    close(uniform.advantages, uniform.combined.unsqueeze(-1).expand(-1, n_steps), atol=1e-6)
    # Only the step weights depend on w_min: the combined advantage does not.
    close(uniform.combined, credit.combined, atol=1e-6)


@SETTINGS
@given(data=batches(n_objectives=1))
def test_single_objective_is_the_vanilla_group_advantage(data):
    """With one objective every mode's combined advantage is the vanilla group advantage (normalised
    once more over the batch for a ``whole_batch_std`` mode), spread by TCD's weights or broadcast."""
    vanilla = reference_vanilla(data["rewards"][:, 0], data["group_ids"])
    n_steps = data["latents"].shape[1] - 1
    if vanilla.numel() > 1:
        batch_normalised = (vanilla - vanilla.mean()) / (vanilla.std() + 1e-8)
    else:
        batch_normalised = torch.zeros_like(vanilla)
    for mode in property_modes():
        credit = run(data, CreditConfig(mode=mode))
        whole_batch = modes.get(mode).whole_batch_std
        expected, tolerance = (batch_normalised, 1e-5) if whole_batch else (vanilla, 1e-6)
        close(credit.combined, expected, atol=tolerance, rtol=tolerance, msg=mode)
        per_step = credit.step_weights.double() if modes.get(mode).step_weighted else torch.ones(1, n_steps)
        close(credit.advantages, expected.unsqueeze(-1) * per_step, atol=tolerance, rtol=tolerance, msg=mode)
        assert bool((credit.mixture == 1).all()), mode


# ----------------------------------------------------------------------------- symmetries


@SETTINGS
@given(data=batches(style="continuous"), config=configs(), perm_seed=st.integers(0, 2**31 - 1))
def test_permuting_samples_permutes_outputs(data, config, perm_seed):
    batch = data["rewards"].shape[0]
    perm = torch.randperm(batch, generator=torch.Generator().manual_seed(perm_seed))  # within and across groups
    base = run(data, config)
    permuted = run({"rewards": data["rewards"][perm], "latents": data["latents"][perm],
                    "group_ids": data["group_ids"][perm]}, config)
    for name in PER_SAMPLE:
        close(getattr(permuted, name), getattr(base, name)[perm], atol=1e-6, msg=name)


@SETTINGS
@given(data=batches(), config=configs(), labels=st.lists(st.integers(-2**40, 2**40), min_size=4, max_size=4, unique=True))
def test_relabelling_groups_changes_nothing(data, config, labels):
    original = data["group_ids"]
    distinct = sorted(set(original.tolist()))
    mapping = {old: labels[i] for i, old in enumerate(distinct)}  # any injective map, order not kept
    relabelled = torch.tensor([mapping[g] for g in original.tolist()], dtype=torch.int64)
    base = run(data, config)
    other = run(dict(data, group_ids=relabelled), config)
    contiguous = run(dict(data, group_ids=torch.tensor([distinct.index(g) for g in original.tolist()])), config)
    for name in QUANTITIES:
        close(getattr(other, name), getattr(base, name), atol=1e-6, msg=name)
        close(getattr(contiguous, name), getattr(base, name), atol=1e-6, msg=name)


@SETTINGS
@given(data=batches(style="continuous", min_group_size=3), config=configs(),
       log_scales=st.lists(st.floats(-1, 3), min_size=4, max_size=4))
def test_positive_rescaling_of_an_objective_changes_nothing(data, config, log_scales):
    """``A = (r - mean) / (std + adv_eps)`` is scale-free up to ``adv_eps``: scaling objective k by
    ``c`` turns ``A`` into ``A * std / (std + adv_eps / c)``, a relative change of at most
    ``adv_eps / (c * std)``. With ``c >= 0.1`` and group stds >= 0.05 (assumed below) that is
    <= 2e-6, so ``A``, ``combined`` and the advantages agree to 1e-4 (weights <= T, |A| <= 3).
    The mixture is a discontinuous function of the advantages where two objectives nearly tie
    (argmin / argmax) and ``lambda`` where ``mean_k A`` is near 0, so such samples are excluded
    (groups of >= 3 continuous draws; margins 1e-3)."""
    rewards, group_ids = data["rewards"], data["group_ids"]
    k = rewards.shape[1]
    for label in set(group_ids.tolist()):
        assume(bool((rewards[group_ids == label].std(dim=0) > 0.05).all()))
    assume(not modes.get(config.mode).vanilla)  # one summed raw reward: invariant to a common scale only (below)
    base = run(data, config)
    adv = base.objective_advantages.double()
    gaps = (adv.unsqueeze(-1) - adv.unsqueeze(-2)).abs() + torch.eye(k, dtype=torch.float64) * 10
    assume(bool((gaps > 1e-3).all()) and bool((adv.mean(dim=-1).abs() > 1e-3).all()))
    scales = torch.tensor([10.0 ** s for s in log_scales[:k]], dtype=torch.float64)
    scaled = run(dict(data, rewards=rewards * scales), config)
    for name in ("objective_advantages", "lambdas", "combined", "advantages", "mixture", "step_weights"):
        close(getattr(scaled, name), getattr(base, name), atol=1e-4, msg=name)
    # The single-reward baseline sums raw rewards, so it is invariant to a common scale only.
    common = float(scales[0])
    for mode in (name for name in property_modes() if modes.get(name).vanilla):
        summed = run(data, CreditConfig(mode=mode))
        close(run(dict(data, rewards=rewards * common), CreditConfig(mode=mode)).combined, summed.combined, atol=1e-4)


# ----------------------------------------------------------------------------- purity


@SETTINGS
@given(data=batches(), config=configs(),
       latent_dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.float64]),
       reward_dtype=st.sampled_from([torch.float32, torch.float64, torch.int64]),
       id_dtype=st.sampled_from([torch.int32, torch.int64]))
def test_inputs_are_never_modified(data, config, latent_dtype, reward_dtype, id_dtype):
    rewards = (data["rewards"] * 2).round().to(reward_dtype) if reward_dtype == torch.int64 else data["rewards"].to(reward_dtype)
    latents = data["latents"].to(latent_dtype)
    group_ids = data["group_ids"].to(id_dtype)
    before = [t.clone() for t in (rewards, latents, group_ids)]
    credit = compute_credit(rewards, latents, group_ids, config, chunk_bytes=64)
    for original, now in zip(before, (rewards, latents, group_ids)):
        assert now.dtype == original.dtype and torch.equal(now, original)
    # No returned tensor aliases an input: scribbling on them leaves the inputs untouched.
    for tensor in credit.tensors().values():
        tensor.fill_(math.nan)
    for original, now in zip(before, (rewards, latents, group_ids)):
        assert torch.equal(now, original)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_float32_latents_are_not_aliased_into_the_work_buffer(dtype):
    """The float32 fast path (``.float()`` is a no-op view) must still leave the trajectory intact."""
    gen = torch.Generator().manual_seed(3)
    latents = torch.randn(4, 5, 3, 7, generator=gen).to(dtype)
    before = latents.clone()
    for chunk_bytes in (1, 4 * 3 * 7 * 4 * 2, 1 << 30):
        compute_credit(torch.randn(4, 2, generator=gen), latents, [0, 0, 1, 1], chunk_bytes=chunk_bytes)
    assert torch.equal(latents, before)


# ----------------------------------------------------------------------------- the modes come from the registry


@pytest.fixture
def made_up_mode():
    """A mode registered for one test: the mean of the objective advantages, the same at every step."""
    from otca_patch.credit.modes import register_mode

    @register_mode("test_mean_of_objectives", title="mean of the objective advantages")
    def mean_of_objectives(x):
        return x.spread(x.objective_advantages.mean(dim=-1))
    yield "test_mean_of_objectives"
    del modes._REGISTRY["test_mean_of_objectives"]


def test_a_newly_registered_mode_gets_the_property_tests(made_up_mode):
    from hypothesis import find

    assert made_up_mode in property_modes()
    assert find(configs(), lambda config: config.mode == made_up_mode).mode == made_up_mode
    # and the properties hold for it: these draw it among the others, and check it in every example
    test_single_objective_is_the_vanilla_group_advantage()
    test_step_constant_when_uniform_weights_or_broadcast_mode()
