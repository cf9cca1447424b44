"""HunyuanVideo best-of-n: the credit is computed over every rollout upstream scored, then the kept
rows are taken. Upstream's advantages are recomputed by running its own statements from
``fastvideo/train_grpo_hunyuan.py`` (the pinned snapshot), not read back from the layer."""
import argparse
import ast

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.targets.dancegrpo import STEP_KEY
from otca_patch.targets.registry import runtime_for
from upstream_snapshots import missing, unpack_snapshot

STEPS = 5  # S sampling steps: all_latents [B, S+1, ...], log_probs [B, S], trained columns S-1


@pytest.fixture(scope="module")
def upstream_blocks():
    """Upstream's statements of train_one_step: (group normalisation up to the mark_rollout_rows hook,
    then best-of-n up to the per_step_advantages hook), compiled from the snapshot's source."""
    root = unpack_snapshot("DanceGRPO-15cc71d.tar.gz")
    if root is None:
        missing("the DanceGRPO snapshot is not in shared/upstream")
    tree = ast.parse((root / "fastvideo" / "train_grpo_hunyuan.py").read_text())
    body = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "train_one_step").body
    sources = [ast.unparse(node) for node in body]
    start = next(i for i, s in enumerate(sources) if s.startswith("n = len(samples['vq_rewards'])"))
    mark = next(i for i, s in enumerate(sources) if s == "samples['mq_advantages'] = mq_advantages")
    stop = next(i for i, s in enumerate(sources) if s.startswith("if args.num_generations != args.bestofn"))
    compile_ = lambda nodes: compile(ast.Module(body=nodes, type_ignores=[]), "train_grpo_hunyuan.py", "exec")
    return compile_(body[start:mark + 1]), compile_(body[mark + 1:stop + 1])


def _args(generations, bestofn, vq_coef=1.0, mq_coef=0.0):
    return argparse.Namespace(num_generations=generations, bestofn=bestofn, vq_coef=vq_coef, mq_coef=mq_coef,
                              use_group=True)


def _rollout(prompts, generations, seed, vq=None):
    generator = torch.Generator().manual_seed(seed)
    batch = prompts * generations
    all_latents = torch.randn(batch, STEPS + 1, 2, 3, 4, 4, generator=generator)
    vq = torch.randn(batch, generator=generator) if vq is None else torch.tensor(vq)
    mq = torch.randn(batch, generator=generator)
    ta = torch.randn(batch, generator=generator)
    samples = {"log_probs": torch.randn(batch, STEPS, generator=generator)[:, :-1],
               "latents": all_latents[:, :-1][:, :-1], "vq_rewards": vq.float(), "mq_rewards": mq.float()}
    return samples, all_latents, ta


def run_step(tmp_path, upstream_blocks, prompts, generations, args, seed, vq=None, **flags):
    """One train_one_step's credit: upstream's own statements with the layer's two hooks between them.
    Returns (samples after best-of-n, the layer's runtime)."""
    normalise, best_of_n = upstream_blocks
    flags = {"otca_mode": "multi_grpo", "otca_rewards": ("upstream.vq",), **flags}
    runtime = runtime_for("dancegrpo-hunyuan", OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs"), **flags))
    runtime.reset()
    samples, all_latents, ta = _rollout(prompts, generations, seed, vq)
    for value in ta.tolist():
        runtime.collect_text_alignment(value)
    torch.manual_seed(seed)  # upstream's shuffle of the kept rows
    exec(normalise, {"torch": torch, "samples": samples, "args": args})
    runtime.mark_rows(samples)  # hook mark_rollout_rows
    exec(best_of_n, {"torch": torch, "samples": samples, "args": args})
    runtime.assign_advantages(samples, all_latents, args)  # hook per_step_advantages
    return samples, runtime


def _trained_by_upstream(samples, args):
    return args.vq_coef * samples["vq_advantages"] + args.mq_coef * samples["mq_advantages"]


def test_the_issues_reproduction_trains_upstreams_advantages(tmp_path, upstream_blocks):
    """2 prompts x 8 generations, bestofn 4, vq only: the kept rows can be a prompt's best rows only;
    normalising within them flipped signs (e.g. [-0.71, 0.71, -0.71, 0.71] for [1.46, 1.59, -1.13, -1.10])."""
    vq = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 2.0, 2.1,  # prompt 0: two far-best rollouts
          1.0, 1.1, 1.2, 1.3, 1.4, 1.5, -0.9, -1.0]  # prompt 1: two far-worst rollouts
    args = _args(8, 4)
    samples, runtime = run_step(tmp_path, upstream_blocks, 2, 8, args, seed=0, vq=vq)
    upstream = _trained_by_upstream(samples, args)
    kept = samples["otca_rows"].tolist()
    assert sorted(kept) == [6, 7, 14, 15]  # only prompt 0's best and prompt 1's worst are kept
    assert (upstream[torch.tensor([kept.index(6), kept.index(7)])] > 1).all()
    trained = samples[STEP_KEY]
    assert trained.shape == (4, STEPS - 1)
    assert torch.allclose(trained, upstream[:, None].expand_as(trained).to(trained.dtype), atol=1e-6)
    # what the layer trained before: the credit of the kept rows alone, in their groups
    alone = credit_from_progress(runtime.record["rewards"], runtime.record["delta_s"],
                                 runtime.record["group_ids"], CreditConfig(mode="multi_grpo")).combined
    assert (torch.sign(alone) != torch.sign(upstream.double())).any()


@pytest.mark.parametrize("prompts,generations,bestofn", [(2, 8, 4), (1, 24, 8), (3, 4, 4), (2, 6, 2)])
def test_random_batches_train_upstreams_advantages_sign_and_value(tmp_path, upstream_blocks, prompts, generations,
                                                                  bestofn):
    for seed in range(12):
        args = _args(generations, bestofn)
        samples, _ = run_step(tmp_path / str(seed), upstream_blocks, prompts, generations, args, seed)
        upstream = _trained_by_upstream(samples, args)
        assert samples[STEP_KEY].shape == (bestofn if generations != bestofn else prompts * generations, STEPS - 1)
        assert torch.allclose(samples[STEP_KEY], upstream[:, None].expand_as(samples[STEP_KEY]), atol=1e-5), seed


def test_vq_and_mq_with_coefficients_train_upstreams_combination(tmp_path, upstream_blocks):
    args = _args(8, 4, vq_coef=1.0, mq_coef=1.0)
    for seed in range(8):
        samples, _ = run_step(tmp_path / str(seed), upstream_blocks, 2, 8, args, seed,
                              otca_rewards=("upstream.vq", "upstream.mq"))
        upstream = _trained_by_upstream(samples, args)
        assert torch.allclose(samples[STEP_KEY], upstream[:, None].expand_as(samples[STEP_KEY]), atol=1e-5), seed


def test_otca_credit_of_kept_rows_is_the_whole_groups_credit_at_those_rows(tmp_path, upstream_blocks):
    args = _args(8, 4)
    samples, runtime = run_step(tmp_path, upstream_blocks, 2, 8, args, seed=3, otca_mode="otca",
                                otca_rewards=("upstream.vq", "upstream.mq", "upstream.ta"))
    record, kept = runtime.record, samples["otca_rows"]
    assert record["rollout_rewards"].shape == (16, 3) and record["rollout_delta_s"].shape == (16, STEPS)
    # TCD's progress of every rollout, from its own latents (recomputed here with plain cosines)
    _, all_latents, ta = _rollout(2, 8, 3)
    flat = all_latents.flatten(2).double()
    cosine = torch.nn.functional.cosine_similarity(flat, flat[:, -1:], dim=-1)
    assert torch.allclose(record["rollout_delta_s"].double(), cosine.diff(dim=1), atol=1e-5)
    assert torch.allclose(record["rollout_rewards"][:, 2].float(), ta)
    whole = credit_from_progress(record["rollout_rewards"], cosine.diff(dim=1),
                                 torch.arange(16) // 8, CreditConfig())
    assert torch.allclose(samples[STEP_KEY].double(), whole.advantages[kept][:, :STEPS - 1].double(), atol=1e-5)
    assert record["group_ids"].tolist() == (kept // 8).tolist()


def test_latents_of_the_kept_rows_only_stop_with_the_hook_named(tmp_path, upstream_blocks):
    args = _args(8, 4)
    runtime = runtime_for("dancegrpo-hunyuan", OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs")))
    runtime.reset()
    samples, all_latents, ta = _rollout(2, 8, 0)
    for value in ta.tolist():
        runtime.collect_text_alignment(value)
    normalise, best_of_n = upstream_blocks
    exec(normalise, {"torch": torch, "samples": samples, "args": args})
    runtime.mark_rows(samples)
    exec(best_of_n, {"torch": torch, "samples": samples, "args": args})
    with pytest.raises(RuntimeError, match="per_step_advantages: all_latents holds 4 rollouts but upstream scored 16"):
        runtime.assign_advantages(samples, all_latents[samples["otca_rows"]], args)
