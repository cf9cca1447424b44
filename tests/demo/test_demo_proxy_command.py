"""``otca-patch proxy``: the demo model path (both dR definitions, the trainer's final state, the
controls), user trajectory files, and clear errors for bad files."""
import json

import pytest
import torch
from demo_fixtures import one_thread  # noqa: F401 (autouse)

from otca_patch.demo import proxy_command as proxy

TINY_MODEL_FLAGS = ["--image_size", "8", "--heads", "1", "--head_dim", "8", "--single_layers", "0", "--text_dim", "8",
                    "--pretrain_steps", "3", "--pretrain_batch", "8", "--sampling_steps", "6", "--quiet"]
ROW_KEYS = {"proxy", "definition", "pearson", "spearman", "pairwise", "recall3", "recall5", "argmax_distance"}


def test_demo_model_trajectories_are_analysed_and_saved_in_the_file_format(tmp_path, capsys):
    out = tmp_path / "proxy"
    flags = ["--out", str(out), "--base_cache", str(tmp_path / "cache"), "--num_trajectories", "6"] + TINY_MODEL_FLAGS
    assert proxy.main(flags) == 0
    printed = capsys.readouterr().out
    assert "0.909" in printed and "sigma_decrement" in printed and "residual Pearson" in printed
    saved = torch.load(out / "trajectories.pt", weights_only=True)
    assert saved["latents"].shape[:2] == (6, 7) and saved["rewards"].shape == (6, 7, 3)
    assert saved["rewards_latent"].shape == (6, 7, 3)
    # both definitions end at the image the trainer scores; the prediction definition's last step adds nothing
    assert torch.equal(saved["rewards"][:, -1], saved["rewards_latent"][:, -1])
    assert torch.equal(saved["rewards"][:, -1], saved["rewards"][:, -2])
    report = json.loads((out / "proxy.json").read_text())
    pairs = {(r["proxy"], r["definition"]) for r in report["rows"]}
    assert pairs == {(p, d) for p in ("dS", "mean_dS_profile", "sigma_decrement") for d in ("prediction", "latent")}
    assert all(ROW_KEYS <= set(r) for r in report["rows"])
    assert -1 <= report["residual_pearson"] <= 1
    # the saved file is a valid input and reproduces the same numbers
    assert proxy.main(["--trajectories", str(out / "trajectories.pt"), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "proxy.json").read_text())
    assert again["rows"] == report["rows"]


def test_a_user_file_with_latents_and_per_state_rewards(tmp_path):
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(4, 9, 2, 5, generator=generator)
    rewards = torch.randn(4, 9, generator=generator).cumsum(1)
    torch.save({"latents": latents, "rewards": rewards}, tmp_path / "mine.pt")
    assert proxy.main(["--trajectories", str(tmp_path / "mine.pt"), "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "proxy.json").read_text())["rows"]
    assert [(r["proxy"], r["definition"]) for r in rows] == [("dS", "prediction"), ("mean_dS_profile", "prediction")]
    assert rows[0]["steps"] == 8


def test_progress_and_gains_given_directly_are_used_as_they_are():
    delta = torch.tensor([[0.1, 0.4, 0.2, 0.3, 0.0], [0.3, 0.1, 0.0, 0.5, 0.2]])
    loaded = proxy.trajectories_from_dict({"delta_s": delta, "delta_r": 2 * delta, "reward_names": ["hps"]})
    analysis = proxy.analyse(loaded)
    row = analysis["rows"][0]
    assert row["proxy"] == "dS" and row["pearson"] == pytest.approx(1.0) and row["argmax_distance"] == 0
    assert analysis["residual_pearson"] == pytest.approx(1.0)


@pytest.mark.parametrize("content, message", [
    (b"garbage", "cannot read"),
    ({"latents": torch.zeros(2, 3, 4)}, "needs 'rewards'"),
    ({"rewards": torch.zeros(2, 3)}, "needs 'latents'"),
    ({"latents": torch.randn(2, 3, 4), "rewards": torch.zeros(2, 5)}, "'rewards' must be"),
    ({"delta_s": torch.zeros(2, 3), "delta_r": torch.zeros(3, 3)}, "does not match"),
    ({"latents": torch.randn(2, 3, 4), "rewards": torch.full((2, 3), float("nan"))}, "non-finite"),
    ({"latents": torch.randn(2, 3, 4), "rewards": torch.zeros(2, 3), "sigmas": torch.zeros(5)}, "'sigmas' must hold"),
    ([1, 2, 3], "expected a dict"),
])
def test_bad_trajectory_files_fail_with_a_clear_message(tmp_path, capsys, content, message):
    path = tmp_path / "bad.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    (tmp_path / "proxy.md").write_text("previous")
    assert proxy.main(["--trajectories", str(path), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert message in err and "otca-patch proxy: error" in err
    assert (tmp_path / "proxy.md").read_text() == "previous"


def test_a_missing_file_is_named(tmp_path, capsys):
    assert proxy.main(["--trajectories", str(tmp_path / "absent.pt"), "--out", str(tmp_path)]) == 1
    assert "no such file" in capsys.readouterr().err


def test_a_bad_count_is_rejected_before_any_work(tmp_path, capsys):
    assert proxy.main(["--num_trajectories", "0", "--out", str(tmp_path)]) == 2
    assert "--num_trajectories" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
