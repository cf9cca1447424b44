"""The trained-step invariant (``otca_patch/targets/invariants.py``): bf16 trajectories, a reversed or shuffled
step order stopped at the first read, FlowGRPO's layout (``compute_log_prob(..., sample, j)``), and the
memory it costs: no copy of the batch at the first step, nothing at later steps."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from otca_patch.hooks import PatchError
from otca_patch.targets.invariants import FINGERPRINT_KEY, TrainedStepCheck, fingerprints, same_step


def trajectory(batch=3, steps=6, shape=(4, 16, 16), dtype=torch.bfloat16, seed=0) -> torch.Tensor:
    """A flow-matching path from noise (step 0) to a sample (last step): ``[B, S, ...]`` in ``dtype``."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(batch, 1, *shape, generator=generator)
    clean = torch.randn(batch, 1, *shape, generator=generator)
    t = torch.linspace(1, 0, steps).reshape(1, steps, *[1] * len(shape))
    return (t * noise + (1 - t) * clean).to(dtype)


def train_first_step(check, samples, order, one_step_dtype=None):
    """Upstream's loop: each sample's columns permuted by ``order`` (the layer's keys moved with
    upstream's only when ``check`` lists them), then column j trained and its advantage read."""
    keys = check.permuted_keys(samples, ["latents"] + ["advantages"])
    moved = {key: samples[key][:, order] for key in keys}
    latents = moved["latents"]  # upstream's own key: always permuted
    advantages = moved["advantages"]
    reads = []
    one_step = check.watch(lambda args, latents: None)
    for j in range(latents.shape[1]):
        trained = latents[:, j] if one_step_dtype is None else latents[:, j].to(one_step_dtype)
        one_step(None, trained)
        reads.append(check.read({**moved, "advantages": advantages}, j, "advantages"))
    check.end_step()
    return torch.stack(reads, 1)


def test_bf16_trajectory_in_order_passes_and_later_steps_are_not_checked():
    latents = trajectory()
    check = TrainedStepCheck()
    samples = {"latents": latents, "advantages": torch.arange(18.0).reshape(3, 6)}
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    read = train_first_step(check, samples, order)
    assert torch.equal(read, samples["advantages"][:, order]) and check.checked == 6
    assert not check.active
    later = {"latents": latents, "advantages": samples["advantages"]}
    assert check.permuted_keys(later, ["latents", "advantages"]) == ["latents", "advantages"]
    assert FINGERPRINT_KEY not in later  # nothing is built or stored once the first step checked


def test_the_one_step_function_may_see_the_latents_upcast():
    """Upstream may train ``latents.float()``: the same values, the same fingerprint."""
    check = TrainedStepCheck()
    samples = {"latents": trajectory(), "advantages": torch.zeros(3, 6)}
    train_first_step(check, samples, torch.arange(6), one_step_dtype=torch.float32)
    assert check.checked == 6


@pytest.mark.parametrize("order", [[5, 4, 3, 2, 1, 0], [1, 0, 2, 3, 4, 5], [0, 2, 1, 3, 4, 5]],
                         ids=["reversed", "first two swapped", "neighbours 1 and 2 swapped"])
def test_steps_trained_in_another_order_than_the_advantage_stop_at_the_first_mismatched_read(order):
    """Upstream moves its latents but not the layer's columns (a step order the layer did not see)."""
    latents = trajectory()
    check = TrainedStepCheck()
    samples = {"latents": latents, "advantages": torch.zeros(3, 6)}
    check.store(samples)
    one_step = check.watch(lambda args, latents: None)
    first_wrong = next(j for j, step in enumerate(order) if step != j)
    for j in range(first_wrong):
        one_step(None, latents[:, order[j]])
        check.read(samples, j, "advantages")
    one_step(None, latents[:, order[first_wrong]])
    with pytest.raises(PatchError, match=f"advantage of column {first_wrong}") as raised:
        check.read(samples, first_wrong, "advantages")
    assert raised.value.hook == "trained_step_matches_advantage_column"


def test_float32_fingerprints_of_bf16_latents_tell_apart_what_bf16_sums_would_not():
    """Two bf16 steps with the same sum and norms 1.4e-4 apart: equal in bf16, apart in float32."""
    step = torch.randn(1, 4096, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    step[0, 0], step[0, 1] = 1.0, -1.0
    moved = step.clone()
    moved[0, 0] += 0.25
    moved[0, 1] -= 0.25  # the sum is unchanged, the squared norm grows by 0.625
    assert torch.linalg.vector_norm(step) == torch.linalg.vector_norm(moved)  # bf16 cannot see it
    assert not same_step(fingerprints(moved, steps_dim=False), fingerprints(step, steps_dim=False))
    assert same_step(fingerprints(step.float(), steps_dim=False), fingerprints(step, steps_dim=False))


def test_flowgrpo_layout_compute_log_prob_trains_sample_latents_column_j():
    """FlowGRPO: the fingerprints are stored in ``samples`` next to the advantages; upstream's zero
    filter, batch shuffle and re-batching move every key; ``compute_log_prob(..., sample, j, ...)``
    trains ``sample["latents"][:, j]``. A step order upstream applies to its own keys only is stopped."""
    def first_epoch(reverse_upstream_steps: bool):
        check = TrainedStepCheck(parameters=("sample", "j"), reader="main",
                                 trained=lambda arguments: arguments["sample"]["latents"][:, arguments["j"]])
        compute_log_prob = check.watch(lambda transformer, pipeline, sample, j, embeds: None)
        samples = {"latents": trajectory(batch=4, steps=4), "advantages": torch.arange(12.0).reshape(4, 3)}
        check.store(samples)
        if reverse_upstream_steps:
            samples = {k: (v.flip(1) if k == "latents" else v) for k, v in samples.items()}
        mask = torch.tensor([True, False, True, True])
        samples = {k: v[mask] for k, v in samples.items()}
        samples = {k: v[torch.tensor([2, 0, 1])] for k, v in samples.items()}
        batches = [dict(zip(samples, x)) for x in zip(*(v.reshape(-1, 1, *v.shape[1:]) for v in samples.values()))]
        for sample in batches:
            for j in range(3):
                compute_log_prob(None, None, sample, j, None)
                check.read(sample, j, "advantages")
        return check

    assert first_epoch(reverse_upstream_steps=False).checked == 9
    with pytest.raises(PatchError, match="function main.*advantage of column 0"):
        first_epoch(reverse_upstream_steps=True)


def test_watch_names_the_missing_parameter():
    check = TrainedStepCheck(parameters=("sample", "j"), trained=lambda a: a["sample"]["latents"])
    with pytest.raises(PatchError, match="compute_log_prob\\(\\) has no parameter 'j'"):
        def compute_log_prob(transformer, pipeline, sample, step):
            return None
        check.watch(compute_log_prob)


def allocated(fn):
    """(largest, total) bytes of the buffers ``fn`` allocates on the CPU (torch's profiler)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    sizes = [e.self_cpu_memory_usage for e in prof.events()
             if e.name.startswith("aten::empty") and e.self_cpu_memory_usage > 0]
    return max(sizes, default=0), sum(sizes)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_fingerprint_copies_no_batch_at_the_first_step_and_costs_nothing_later(dtype):
    """The check used to make a float64 copy of the latents at every step (4x a bf16 batch)."""
    batch, steps, shape = 4, 8, (16, 32, 32)
    latents = trajectory(batch, steps, shape, dtype)
    one_sample_step = 4 * torch.Size(shape).numel()  # float32 bytes
    check = TrainedStepCheck()
    samples = {"latents": latents}
    largest, total = allocated(lambda: check.permuted_keys(samples, ["latents"]))
    assert largest <= one_sample_step  # bf16: one sample's step converted at a time; float32: none
    assert total <= batch * steps * one_sample_step + 4096  # never more than converting each step once
    check.checked = 1
    check.end_step()
    one_step = check.watch(lambda args, latents: None)
    sample = {"latents": latents, "advantages": torch.zeros(batch, steps)}
    later = allocated(lambda: (check.permuted_keys(samples, ["latents"]), one_step(None, latents[:, 0]),
                               check.read(sample, 0, "advantages")))
    assert later == (0, 0)
