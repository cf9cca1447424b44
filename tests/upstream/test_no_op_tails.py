"""Patched upstreams are not refused for nothing. A copy of every trainer with
``.clone()`` / ``.detach()`` / ``.contiguous()`` appended to every anchored tensor passes ``doctor``
(whose identity line names what needed it), and its ``--otca`` smoke trains exactly what the run on
the file the spec is verified on trains, with the credit engine's advantages. Each spec is tailed in
the checkout of the commit it is verified on (the pinned snapshots; FlowGRPO's 9745241 for the specs
verified there). A change that is not a no-op is still refused.
"""
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from otca_patch.hooks.checkout import upstream_env_var
from otca_patch.hooks.spec import load_specs
from upstream_snapshots import upstream_checkout
import upstream_snapshots as snapshots

from .conftest import REPO, require_flowgrpo_packages, run_flowgrpo_smoke, run_smoke

pytestmark = pytest.mark.upstream

SUBMIT_IMAGES = ("executor.submit(reward_fn, images, prompts, prompt_metadata, only_strict=True)",
                 "executor.submit(reward_fn, images.detach(), prompts, prompt_metadata, only_strict=True)")
FLUX_LATENTS = ('packed_noisy_model_input = sample["latents"][:, j]', 'packed_noisy_model_input = sample["latents"].detach()[:, j]')
# Per hook point or pin (by name), each anchored value that is a tensor: (upstream text, text with a
# tail). DanceGRPO's trainers name their hook points alike; SPEC_TAILS adds or replaces per target.
DANCEGRPO_TAILS = {
    "trained_columns": [('len(samples["timesteps"][0])', 'len(samples["timesteps"][0].clone())')],
    "trained_latents_column": [('sample["latents"][:,_]', 'sample["latents"].detach()[:,_]')],
    "trained_log_probs_column": [('sample["log_probs"][:,_]', 'sample["log_probs"].contiguous()[:,_]')],
    "trained_timesteps_column": [('sample["timesteps"][:,_]', 'sample["timesteps"].clone()[:,_]')],
    "per_step_advantages": [('samples["advantages"] = advantages\n', 'samples["advantages"] = advantages.clone()\n')],
    "read_step_advantage": [('sample["advantages"],', 'sample["advantages"].clone(),')],
}
# FlowGRPO's trainers (both commits) name their hook points alike too
FLOWGRPO_TAILS = {
    "trained_advantage_column": [('sample["advantages"][:, j]', 'sample["advantages"].clone()[:, j]')],
    "read_step_advantage": [],  # the pin's anchor: tailed above
    "trained_log_probs_column": [('sample["log_probs"][:, j]', 'sample["log_probs"].detach()[:, j]')],
    "trained_latents_column": [('noise_pred.float(),\n        sample["timesteps"][:, j],\n        sample["latents"][:, j].float(),',
                                'noise_pred.float().contiguous(),\n        sample["timesteps"].clone()[:, j],\n'
                                '        sample["latents"][:, j].detach().float(),')],
    "collect_images": [SUBMIT_IMAGES],
    "collect_rollout": [SUBMIT_IMAGES],
    "probe_decode": [],  # SD3's anchor is collect_images' line: tailed above
    "per_step_advantages": [("            .to(accelerator.device)\n        )\n",
                             "            .to(accelerator.device)\n        ).clone()\n")],
    "record_kept_samples": [("{k: v[mask] for k, v", "{k: v[mask].contiguous() for k, v")],
    "record_loss": [('info["loss"].append(loss)', 'info["loss"].append(loss.detach())')],
    "zero_advantage_filter": [('samples["advantages"].abs().sum(dim=1) != 0',
                               'samples["advantages"].clone().abs().sum(dim=1) != 0')],
    "window_states_stacked": [("latents = torch.stack(latents, dim=1)", "latents = torch.stack(latents, dim=1).clone()")],
}
UPSTREAM_TAILS = {"DanceGRPO": DANCEGRPO_TAILS, "flow_grpo": FLOWGRPO_TAILS}
SPEC_TAILS = {
    "dancegrpo-hunyuan": {
        "collect_text_alignment": [("mq_reward = torch.tensor(reward[0]['MQ']).to(device)\n",
                                    "mq_reward = torch.tensor(reward[0]['MQ']).to(device).clone()\n")],
        "collect_failed_text_alignment": [("mq_reward = torch.tensor(-1.0).to(device)\n",
                                           "mq_reward = torch.tensor(-1.0).to(device).detach()\n")],
        "mark_rollout_rows": [('samples["mq_advantages"] = mq_advantages\n',
                               'samples["mq_advantages"] = mq_advantages.clone()\n')],
        "one_loss_on_the_step_advantage": [("args.vq_coef*vq_loss + args.mq_coef*mq_loss",
                                            "args.vq_coef*vq_loss.clone() + args.mq_coef*mq_loss.contiguous()")],
    },
    "dancegrpo-skyreels-i2v": {
        "collect_videoalign_scores": [("reward = torch.tensor(reward[0]['MQ']).to(device)\n",
                                       "reward = torch.tensor(reward[0]['MQ']).to(device).clone()\n")],
        "collect_failed_videoalign": [("reward = torch.tensor(-1.0).to(device)\n",
                                       "reward = torch.tensor(-1.0).to(device).detach()\n")],
    },
    "dancegrpo-wan": {
        "timestep_of_each_forward": [("timestep_value = int(sigma * 1000)", "timestep_value = int(sigma.clone() * 1000)")],
        "synchronise_gradients": [("max_norm=max_grad_norm)\n", "max_norm=max_grad_norm).detach()\n")],
    },
    "dancegrpo-sd": {
        "trained_latents_column": [('sample["latents"][:, j]', 'sample["latents"].detach()[:, j]')],
        "trained_log_probs_column": [('sample["log_probs"][:, j]', 'sample["log_probs"].contiguous()[:, j]')],
        "final_latent_last": [("latents = torch.stack(latents, dim=1).detach()",  # the examples
                               "latents = torch.stack(latents, dim=1).detach().clone()")],
        "per_step_advantages": [('samples["final_advantages"] = advantages\n',
                                 'samples["final_advantages"] = advantages.clone()\n')],
        "read_step_advantage": [('sample["final_advantages"],', 'sample["final_advantages"].clone(),')],
        "record_loss": [("accelerator.backward(loss)", "accelerator.backward(loss.clone())")],
        "record_grad_norm": [("unet.parameters(), config.train.max_grad_norm\n                            )",
                              "unet.parameters(), config.train.max_grad_norm\n                            ).detach()")],
    },
    # FlowGRPO 9745241 (tailed in that commit's checkout, where these specs are verified)
    "flowgrpo-flux": {"trained_latents_column": [FLUX_LATENTS]},
    "flowgrpo-flux-fast": {"trained_latents_column": [FLUX_LATENTS]},
    "flowgrpo-flux-kontext": {
        "trained_latents_column": [('latent_model_input = sample["latents"][:, j]',
                                    'latent_model_input = sample["latents"].detach()[:, j]')],
        "collect_images": [("executor.submit(reward_fn, images, prompts, prompt_metadata, ref_images, only_strict=True)",
                            "executor.submit(reward_fn, images.detach(), prompts, prompt_metadata, ref_images, only_strict=True)")],
    },
    "flowgrpo-qwenimage": {
        "trained_latents_column": [('torch.cat([sample["latents"][:, j], sample["latents"][:, j]], dim=0)',
                                    'torch.cat([sample["latents"].detach()[:, j], sample["latents"][:, j]], dim=0)')],
        "window_states_stacked": [('latents = torch.stack(collected_data["all_latents"], dim=1)',
                                   'latents = torch.stack(collected_data["all_latents"], dim=1).clone()')],
        "advantages_split_rank_major": [("advantages.reshape(world_size, -1, advantages.shape[-1])[rank]",
                                         "advantages.reshape(world_size, -1, advantages.shape[-1]).contiguous()[rank]")],
        "per_step_advantages": [("            .to(device)\n        )\n", "            .to(device)\n        ).clone()\n")],
    },
    "flowgrpo-qwenimage-edit": {
        "trained_latents_column": [('latent_model_input = sample["latents"][:, j]',
                                    'latent_model_input = sample["latents"].detach()[:, j]')],
        "collect_rollout": [("executor.submit(reward_fn, images, prompts, prompt_metadata, ref_images, only_strict=True)",
                             "executor.submit(reward_fn, images.detach(), prompts, prompt_metadata, ref_images, only_strict=True)")],
        "window_states_stacked": [('latents = torch.stack(collected_data["all_latents"], dim=1)',
                                   'latents = torch.stack(collected_data["all_latents"], dim=1).clone()')],
        "advantages_split_rank_major": [("advantages.reshape(world_size, -1, advantages.shape[-1])[rank]",
                                         "advantages.reshape(world_size, -1, advantages.shape[-1]).contiguous()[rank]")],
        "per_step_advantages": [("            .to(device)\n        )\n", "            .to(device)\n        ).clone()\n")],
    },
    "flowgrpo-sd3-guard": {
        "trained_prev_sample_mean_column": [('sample["prev_sample_mean"][:, j]', 'sample["prev_sample_mean"].clone()[:, j]')],
    },
    "flowgrpo-sd3-fast": {
        "window_latents_stacked": [("latents = torch.stack(\n                latents, dim=1\n            )",
                                    "latents = torch.stack(\n                latents, dim=1\n            ).detach()")],
    },
    "flowgrpo-wan2-1": {
        "collect_images": [("executor.submit(reward_fn, videos, prompts, prompt_metadata, only_strict=True)",
                            "executor.submit(reward_fn, videos.detach(), prompts, prompt_metadata, only_strict=True)")],
    },
    "mixgrpo-flux": {
        "shuffled_columns": [('int(len(samples["timesteps"][0])*args', 'int(len(samples["timesteps"][0].clone())*args')],
        "shuffled_only_under_all": [("        ).to(device) \n", "        ).to(device).contiguous() \n")],
        "step_index_of_column": [('perms[i][_] if args.training_strategy', 'perms[i].clone()[_] if args.training_strategy')],
        "trained_latents_column": [('sample["latents"][:,_]', 'sample["latents"].detach()[:,_]')],
        "trained_log_probs_column": [('sample["log_probs"][:,_]', 'sample["log_probs"].contiguous()[:,_]')],
        "per_model_rewards": [('samples["rewards"][model_name] = model_rewards.to(torch.float32)\n',
                               'samples["rewards"][model_name] = model_rewards.to(torch.float32).clone()\n')],
        "reward_weights_per_model": [("merged_advantages += model_advs * reward_weights",
                                      "merged_advantages += model_advs.clone() * reward_weights")],
        "advantage_printed_as_scalar": [('sample["advantages"].item()', 'sample["advantages"].detach().item()')],
        "per_step_advantages": [('samples["advantages"] = merged_advantages\n',
                                 'samples["advantages"] = merged_advantages.clone()\n')],
        "per_step_advantages_summed": [('samples["advantages"] = advantages\n',
                                        'samples["advantages"] = advantages.clone()\n')],
        "read_step_advantage": [('sample["advantages"],', 'sample["advantages"].clone(),')],
    },
}
# Hook points and pins whose anchors name no tensor a tail could follow (the anchor's values are
# ints, lists of keys, a tuple unpacked, PIL images, numpy frames, modules, or a `def`).
NO_TENSOR = {"collect_final_prediction", "collect_decoded_images", "collect_decoded_videos", "record_step_order",
             "permute_advantages_with_steps", "watch_trained_step", "log_each_step", "log_each_epoch",
             "optimizer_after_loading", "load_experts", "save_experts", "bind_objectives",
             "trained_columns_in_sampling_order", "watch_rollout", "whole_trajectory_stored", "window_states_kept",
             "sampling_returns_the_window", "window_width_trained", "trained_columns_are_the_window",
             # the objective-timing probe: a tuple unpacked, a `def`, an import, a tuple unpacked
             "probe_step_predictions", "probe_unpack", "probe_sde_steps", "arm_probe"}
NO_TENSOR_IN = {"dancegrpo-sd": {"trained_columns"}, "dancegrpo-hunyuan": {"per_step_advantages"},
                # the probe decodes after upstream saves a PIL image / exports numpy frames
                "dancegrpo-flux": {"probe_decode"}, "dancegrpo-wan": {"probe_decode"},
                "mixgrpo-flux": {"window_columns", "frozen_init_columns", "sign_balance_reads_advantages",
                                 "bind_upstream_rewards", "record_trained_steps"}}
# (upstream, hook point) whose tail follows the whole anchored expression or sits in what `...` matches:
# found as before, skipping nothing
OUTSIDE_THE_ANCHOR = {("DanceGRPO", "read_step_advantage"), ("DanceGRPO", "record_grad_norm"),
                      ("flow_grpo", "per_step_advantages"), ("MixGRPO", "read_step_advantage")}
# (target, hook point) of those whose own anchor spells the whole value: doctor names the tail past it
SPELLED_OUT = {("flowgrpo-wan2-1", "per_step_advantages")}


def named_by_doctor(spec, name: str) -> bool:
    return (spec.upstream, name) not in OUTSIDE_THE_ANCHOR or (spec.name, name) in SPELLED_OUT


def tails_of(spec) -> dict:
    """``{hook point or pin: [(text, text with a tail)]}`` of ``spec``; every one of its names is covered."""
    table = {**UPSTREAM_TAILS.get(spec.upstream, {}), **SPEC_TAILS.get(spec.name, {})}
    skipped = NO_TENSOR | NO_TENSOR_IN.get(spec.name, set())
    names = [hook.name for hook in spec.pins + spec.hooks]
    uncovered = [name for name in names if name not in skipped and name not in table]
    assert not uncovered, f"{spec.name}: add the anchored tensors of {uncovered} to this test's tables"
    return {name: table[name] for name in names if name not in skipped}


#: each upstream's pinned commit (7 hex digits), from its snapshot's name
PINNED_COMMITS = {upstream: archive.removesuffix(".tar.gz").split("-")[-1]
                  for upstream, archive in snapshots.PINNED_SNAPSHOTS.items()}


def verified_checkout(upstream: str, commit: str, marker_file: str) -> Path:
    """The checkout of ``upstream`` at ``commit`` (7 hex digits): the pinned one or a newer snapshot."""
    if commit == PINNED_COMMITS[upstream]:
        return upstream_checkout(upstream, upstream_env_var(upstream), marker_file)
    return snapshots.newer_checkout(upstream, commit, marker_file)


def commit_of(spec) -> tuple:
    return spec.upstream, spec.verified_commit[:7]


#: every spec of an upstream the tests have snapshots of, each tailed in the checkout of the commit it is
#: verified on (a spec verified on a public fork is checked on the fork's checkout: tests/hooks/test_fork_specs.py)
SPECS = [spec for spec in load_specs() if spec.upstream in snapshots.PINNED_SNAPSHOTS]


def test_every_spec_is_verified_on_a_commit_this_test_has():
    assert {commit_of(spec) for spec in SPECS} <= set(PINNED_COMMITS.items()) | set(snapshots.NEWER_SNAPSHOTS)


def mutated_checkout(upstream: str, commit: str, tmp_path: Path) -> Path:
    """A copy of ``upstream`` at ``commit`` with every anchored tensor of every file a spec verified
    there covers tailed."""
    specs = [spec for spec in SPECS if commit_of(spec) == (upstream, commit)]
    verified = verified_checkout(upstream, commit, specs[0].file)
    copy = tmp_path / verified.name
    shutil.copytree(verified, copy, ignore=shutil.ignore_patterns(".git"))
    for spec in specs:
        trainer = copy / spec.file
        source = trainer.read_text()
        for name, edits in tails_of(spec).items():
            for text, tailed in edits:
                assert text in source, f"{spec.file}: {name}: {text!r} is not in the file at {commit}"
                source = source.replace(text, tailed)
        compile(source, str(trainer), "exec")
        trainer.write_text(source)
    return copy


def doctor(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def section(report: str, spec) -> str:
    return report.split(f"{spec.name}: {spec.file}\n")[1].split("\n\n")[0]


@pytest.fixture(scope="module")
def mutated(tmp_path_factory):
    """``mutated(upstream, commit)``: the tailed copy of that upstream at that commit, made once."""
    made = {}

    def get(upstream: str, commit: str) -> Path:
        if (upstream, commit) not in made:
            made[upstream, commit] = mutated_checkout(upstream, commit, tmp_path_factory.mktemp(f"{upstream}-{commit}"))
        return made[upstream, commit]

    return get


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_every_trainer_with_tails_on_its_anchored_tensors_passes_doctor(mutated, spec):
    report = doctor(mutated(*commit_of(spec)))
    assert report.returncode == 0, report.stdout + report.stderr
    mine = section(report.stdout, spec)
    assert "FAIL" not in mine and f"{spec.name} ({spec.file}): holds" in report.stdout
    identity = next(line for line in mine.splitlines() if "the spec was verified on" in line)  # after the spec line
    assert "differs from the file the spec was verified on" in identity and "its structure still matches" in identity
    named = set(re.findall(r"(?:calls upstream added: |\), )(\w+) \(", identity))
    assert named == {name for name in tails_of(spec) if named_by_doctor(spec, name)}, identity


def test_changes_that_are_not_no_ops_are_still_refused(dancegrpo, tmp_path):
    """The SD trainer's two points of the issue, with a value change instead of a tail."""
    copy = tmp_path / "DanceGRPO"
    shutil.copytree(dancegrpo / "fastvideo", copy / "fastvideo")
    trainer = copy / "fastvideo" / "train_grpo_sd.py"
    source = trainer.read_text()
    trainer.write_text(source.replace('samples["final_advantages"] = advantages\n',
                                      'samples["final_advantages"] = advantages.clone() * 2\n')
                       .replace("latents = torch.stack(latents, dim=1).detach()",
                                "latents = torch.stack(latents, dim=1).detach().mean(0, keepdim=True)"))
    report = doctor(copy)
    assert report.returncode == 1
    failing = [line.split()[1] for line in report.stdout.splitlines() if "FAIL: anchor not found" in line]
    assert failing == ["final_latent_last", "per_step_advantages"]
    assert "no-op" not in report.stdout


def trained(log: list) -> list:
    """The run log less why its spec was picked (the pinned file by its sha256, the tailed copy by its
    hook points holding): everything the run trained and computed."""
    return [{**record, "spec": {k: v for k, v in (record.get("spec") or {}).items() if k != "chosen"}}
            for record in log]


def credit_problems(out: Path) -> list:
    """``scripts/check_run_log_credit.py``: the logged advantages recomputed by the credit engine."""
    spec = importlib.util.spec_from_file_location("check_run_log_credit", REPO / "scripts" / "check_run_log_credit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check(out, 1)


@pytest.mark.parametrize("target", ["dancegrpo-sd", "dancegrpo-flux"])
def test_the_tailed_dancegrpo_trainer_trains_exactly_the_pinned_commits_run(dancegrpo, mutated, target, tmp_path):
    pinned = run_smoke(dancegrpo, tmp_path / "pinned", "--target", target, "--steps", "1", "--otca",
                       env={"OMP_NUM_THREADS": "1"})
    tailed = run_smoke(mutated("DanceGRPO", PINNED_COMMITS["DanceGRPO"]), tmp_path / "tailed", "--target", target, "--steps", "1", "--otca",
                       env={"OMP_NUM_THREADS": "1"})
    assert "hold only past no-op" in tailed.completed.stderr and "hold only past" not in pinned.completed.stderr
    assert tailed.result["steps"] == pinned.result["steps"]
    assert len(tailed.log) == 1 and trained(tailed.log) == trained(pinned.log)
    assert credit_problems(tailed.out) == []


@pytest.mark.parametrize("target, commit, tiny_model", [("flowgrpo-sd3", PINNED_COMMITS["flow_grpo"], "OTCA_TINY_SD3_DIR"),
                                                         ("flowgrpo-wan2-1", "9745241", "OTCA_TINY_WAN_DIR")])
def test_the_tailed_flowgrpo_trainer_trains_exactly_the_verified_commits_run(mutated, target, commit, tiny_model, tmp_path):
    """SD3 on the pinned commit, Wan2.1 (one process, as upstream's README launches it) on 9745241."""
    require_flowgrpo_packages()
    spec = next(spec for spec in SPECS if spec.name == target)
    assert commit_of(spec) == ("flow_grpo", commit)
    verified = verified_checkout("flow_grpo", commit, spec.file)
    tiny = {tiny_model: str(tmp_path / "tiny")}
    pinned = run_flowgrpo_smoke(verified, tmp_path / "pinned", "--otca", "--steps", "1", env=tiny, target=target)
    tailed = run_flowgrpo_smoke(mutated("flow_grpo", commit), tmp_path / "tailed", "--otca", "--steps", "1", env=tiny,
                                target=target)
    assert "hold only past no-op" in tailed.completed.stderr and "hold only past" not in pinned.completed.stderr
    assert tailed.trained == pinned.trained
    assert len(tailed.log) == 1 and trained(tailed.log) == trained(pinned.log)
    assert credit_problems(tailed.out) == []
