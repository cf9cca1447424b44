"""Issue 19: patched upstreams are not refused for nothing. A copy of every trainer with
``.clone()`` / ``.detach()`` / ``.contiguous()`` appended to every anchored tensor passes ``doctor``
(whose identity line names what needed it), and its ``--otca`` smoke trains exactly what the pinned
commit's run trains, with the credit engine's advantages. A change that is not a no-op is still refused.
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

from .conftest import REPO, run_flowgrpo_smoke, run_smoke

pytestmark = pytest.mark.upstream

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
    "flowgrpo-sd3": {
        "trained_advantage_column": [('sample["advantages"][:, j]', 'sample["advantages"].clone()[:, j]')],
        "read_step_advantage": [],  # the pin's anchor: tailed above
        "trained_log_probs_column": [('sample["log_probs"][:, j]', 'sample["log_probs"].detach()[:, j]')],
        "trained_latents_column": [('noise_pred.float(),\n        sample["timesteps"][:, j],\n        sample["latents"][:, j].float(),',
                                    'noise_pred.float().contiguous(),\n        sample["timesteps"].clone()[:, j],\n'
                                    '        sample["latents"][:, j].detach().float(),')],
        "collect_images": [("executor.submit(reward_fn, images, prompts, prompt_metadata, only_strict=True)",
                            "executor.submit(reward_fn, images.detach(), prompts, prompt_metadata, only_strict=True)")],
        "per_step_advantages": [("            .to(accelerator.device)\n        )\n",
                                 "            .to(accelerator.device)\n        ).clone()\n")],
        "record_kept_samples": [("{k: v[mask] for k, v", "{k: v[mask].contiguous() for k, v")],
        "record_loss": [('info["loss"].append(loss)', 'info["loss"].append(loss.detach())')],
        "zero_advantage_filter": [('samples["advantages"].abs().sum(dim=1) != 0',
                                   'samples["advantages"].clone().abs().sum(dim=1) != 0')],
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
             "trained_columns_in_sampling_order"}
NO_TENSOR_IN = {"dancegrpo-sd": {"trained_columns"}, "dancegrpo-hunyuan": {"per_step_advantages"},
                "mixgrpo-flux": {"window_columns", "frozen_init_columns", "sign_balance_reads_advantages",
                                 "bind_upstream_rewards", "record_trained_steps"}}
# (upstream, hook point) whose tail follows the whole anchored expression or sits in what `...` matches:
# found as before, skipping nothing
OUTSIDE_THE_ANCHOR = {("DanceGRPO", "read_step_advantage"), ("DanceGRPO", "record_grad_norm"),
                      ("flow_grpo", "per_step_advantages"), ("MixGRPO", "read_step_advantage")}


def tails_of(spec) -> dict:
    """``{hook point or pin: [(text, text with a tail)]}`` of ``spec``; every one of its names is covered."""
    table = {**(DANCEGRPO_TAILS if spec.upstream == "DanceGRPO" else {}), **SPEC_TAILS.get(spec.name, {})}
    skipped = NO_TENSOR | NO_TENSOR_IN.get(spec.name, set())
    names = [hook.name for hook in spec.pins + spec.hooks]
    uncovered = [name for name in names if name not in skipped and name not in table]
    assert not uncovered, f"{spec.name}: add the anchored tensors of {uncovered} to this test's tables"
    return {name: table[name] for name in names if name not in skipped}


def on_the_pinned_commit(spec) -> bool:
    """Whether ``spec`` is verified on its upstream's pinned snapshot (the checkout this test tails).
    FlowGRPO's 9745241 specs (FLUX, Qwen-Image, SD3-Fast, GRPO-Guard) have no tails table yet."""
    return spec.verified_commit[:7] in snapshots.PINNED_SNAPSHOTS[spec.upstream]


PINNED_SPECS = [spec for spec in load_specs() if on_the_pinned_commit(spec)]


def mutated_checkout(upstream: str, tmp_path: Path) -> Path:
    """A copy of the pinned ``upstream`` checkout with every anchored tensor of every spec's file tailed."""
    specs = [spec for spec in PINNED_SPECS if spec.upstream == upstream]
    pinned = upstream_checkout(upstream, upstream_env_var(upstream), specs[0].file)
    copy = tmp_path / pinned.name
    shutil.copytree(pinned, copy, ignore=shutil.ignore_patterns(".git"))
    for spec in specs:
        trainer = copy / spec.file
        source = trainer.read_text()
        for name, edits in tails_of(spec).items():
            for text, tailed in edits:
                assert text in source, f"{spec.file}: {name}: {text!r} is not in the pinned file"
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
    """``mutated(upstream)``: the tailed copy of that upstream, made once."""
    made = {}

    def get(upstream: str) -> Path:
        if upstream not in made:
            made[upstream] = mutated_checkout(upstream, tmp_path_factory.mktemp(upstream))
        return made[upstream]

    return get


@pytest.mark.parametrize("spec", PINNED_SPECS, ids=lambda spec: spec.name)
def test_every_trainer_with_tails_on_its_anchored_tensors_passes_doctor(mutated, spec):
    report = doctor(mutated(spec.upstream))
    assert report.returncode == 0, report.stdout + report.stderr
    mine = section(report.stdout, spec)
    assert "FAIL" not in mine and f"{spec.name} ({spec.file}): holds" in report.stdout
    identity = next(line for line in mine.splitlines() if "the spec was verified on" in line)  # after the spec line
    assert "differs from the file the spec was verified on" in identity and "its structure still matches" in identity
    named = set(re.findall(r"(?:calls upstream added: |\), )(\w+) \(", identity))
    assert named == {name for name in tails_of(spec) if (spec.upstream, name) not in OUTSIDE_THE_ANCHOR}, identity


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
    tailed = run_smoke(mutated("DanceGRPO"), tmp_path / "tailed", "--target", target, "--steps", "1", "--otca",
                       env={"OMP_NUM_THREADS": "1"})
    assert "hold only past no-op" in tailed.completed.stderr and "hold only past" not in pinned.completed.stderr
    assert tailed.result["steps"] == pinned.result["steps"]
    assert len(tailed.log) == 1 and trained(tailed.log) == trained(pinned.log)
    assert credit_problems(tailed.out) == []


def test_the_tailed_flowgrpo_trainer_trains_exactly_the_pinned_commits_run(flow_grpo, mutated, tmp_path):
    tiny = {"OTCA_TINY_SD3_DIR": str(tmp_path / "tiny_sd3")}
    pinned = run_flowgrpo_smoke(flow_grpo, tmp_path / "pinned", "--otca", "--steps", "1", env=tiny)
    tailed = run_flowgrpo_smoke(mutated("flow_grpo"), tmp_path / "tailed", "--otca", "--steps", "1", env=tiny)
    assert "hold only past no-op" in tailed.completed.stderr
    assert tailed.trained == pinned.trained
    assert len(tailed.log) == 1 and trained(tailed.log) == trained(pinned.log)
    assert credit_problems(tailed.out) == []
