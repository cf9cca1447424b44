"""Pure helpers of the FlowGRPO target: prompt groups over processes, objectives, TCD's progress
from upstream's latents layout, the smoke config's epoch stop, otca_run.sh's `--` form."""
import os
import subprocess
import sys

import pytest
import torch

from otca_patch.credit import similarity_to_final, step_progress
from otca_patch.targets.flowgrpo_groups import group_ids_from_keys, prompt_keys
from otca_patch.objective_set import Objectives
from otca_patch.targets.flowgrpo import AVG_KEY, trajectory_progress, upstream_rewards


def test_prompt_keys_are_equal_across_processes_whatever_their_hash_seed():
    code = "from otca_patch.targets.flowgrpo_groups import prompt_keys; print(prompt_keys(['a cat', 'a dog']).tolist())"
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outputs) == 1
    assert eval(outputs.pop()) == prompt_keys(["a cat", "a dog"]).tolist()


def test_prompt_keys_separate_prompts_and_fit_int64():
    keys = prompt_keys(["a cat", "a dog", "a cat", "A cat"])
    assert keys.dtype == torch.long and (keys >= 0).all()
    assert keys[0] == keys[2] and len(set(keys.tolist())) == 3


def test_group_ids_number_gathered_keys_by_first_appearance():
    keys = torch.tensor([907, 13, 907, 5, 13, 5])
    assert group_ids_from_keys(keys).tolist() == [0, 1, 0, 2, 1, 2]


def test_every_process_derives_the_same_groups_from_its_own_prompts():
    rank0, rank1 = ["a cat", "a dog", "a cat"], ["a dog", "a fox", "a cat"]
    gathered = torch.cat([prompt_keys(rank0), prompt_keys(rank1)])  # what gather_rows hands every process
    single = prompt_keys(rank0 + rank1)  # one process holding the whole batch
    assert group_ids_from_keys(gathered).tolist() == group_ids_from_keys(single).tolist() == [0, 1, 0, 1, 2, 0]


def test_objective_names_map_to_upstreams_reward_dictionary():
    resolver = upstream_rewards({"pickscore": 0.5, "ocr": 1.0})
    assert resolver.resolve("upstream") == {"upstream": AVG_KEY} and resolver.resolve("avg") == {"avg": AVG_KEY}
    assert resolver.resolve("ocr") == {"ocr": "ocr"} and resolver.resolve("upstream.ocr") == {"upstream.ocr": "ocr"}
    assert resolver.resolve("clip_t") is None  # a registry model
    with pytest.raises(ValueError, match="upstream.aesthetic.*upstream.pickscore, upstream.ocr"):
        resolver.resolve("upstream.aesthetic")


def test_reward_matrix_reads_upstreams_columns_in_flag_order():
    objectives = Objectives(["ocr", "upstream", "pickscore"], upstream_rewards({"pickscore": 0.5, "ocr": 1.0}),
                            {}, {}, "cpu")
    rewards = {"pickscore": torch.tensor([1.0, 2.0]), "ocr": torch.tensor([0.1, 0.2]),
               AVG_KEY: torch.tensor([0.6, 1.2]), "avg": torch.tensor([[0.6] * 3, [1.2] * 3])}
    assert not objectives.needs_images
    assert torch.equal(objectives.matrix(rewards, None, []), torch.tensor([[0.1, 0.6, 1.0], [0.2, 1.2, 2.0]]))


def test_trajectory_progress_is_tcd_on_the_whole_trajectory():
    torch.manual_seed(0)
    trajectory = torch.randn(3, 5, 4, 2, 2)  # [B, S+1, C, H, W]: upstream's latents before slicing
    latents, next_latents = trajectory[:, :-1], trajectory[:, 1:]
    expected = step_progress(similarity_to_final(trajectory).double())
    assert torch.allclose(trajectory_progress(latents, next_latents), expected, atol=1e-12)


def test_smoke_config_ends_the_run_at_the_requested_epoch_only():
    from otca_patch.smoke.flowgrpo_config import StopAtEpoch

    eval_freq = StopAtEpoch(2)
    assert [epoch % eval_freq == 0 for epoch in (0, 1)] == [True, False]  # upstream evaluates at epoch 0 only
    with pytest.raises(SystemExit) as stop:
        2 % eval_freq
    assert stop.value.code == 0


def _wrapper(*argv):
    return subprocess.run([sys.executable, "-m", "otca_patch.launch.wrapper", *argv], capture_output=True,
                          text=True, timeout=120)


def test_an_untargeted_command_after_dashes_is_refused_with_otca_and_runs_without():
    show = "import os; print(os.environ.get('OTCA_PATCH_ARGS'))"
    done = _wrapper("--otca", "--otca_mode", "tcd", "--", sys.executable, "-c", show)
    # it runs no targeted trainer, so an --otca launch is refused before the command starts
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "it names no Python script or module" in done.stderr
    plain = _wrapper("--", sys.executable, "-c", show)
    assert plain.returncode == 0 and plain.stdout.strip() == "None"


def test_otca_run_refuses_upstream_arguments_before_dashes():
    done = _wrapper("--otca", "--config", "x", "--", "true")
    assert done.returncode == 2 and "only otca-patch flags" in done.stderr
    assert _wrapper("--otca", "--").returncode == 2
