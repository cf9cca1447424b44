"""``otca-patch proxy``: the demo model path, user trajectory files, and clear errors for bad files."""
import json

import pytest
import torch

from otca_patch.demo import proxy

TINY_MODEL_FLAGS = ["--image-size", "8", "--heads", "1", "--head-dim", "8", "--single-layers", "0", "--text-dim", "8",
                    "--pretrain-steps", "3", "--pretrain-batch", "8", "--sampling-steps", "6", "--quiet"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_demo_model_trajectories_are_analysed_and_saved_in_the_file_format(tmp_path, capsys):
    out = tmp_path / "proxy"
    flags = ["--out", str(out), "--base-cache", str(tmp_path / "cache"), "--num-trajectories", "6"] + TINY_MODEL_FLAGS
    assert proxy.main(flags) == 0
    printed = capsys.readouterr().out
    assert "0.909" in printed and "colour_fidelity" in printed and "sum of rewards" in printed
    saved = torch.load(out / "trajectories.pt", weights_only=True)
    assert saved["latents"].shape[:2] == (6, 7) and saved["rewards"].shape == (6, 7, 3)
    report = json.loads((out / "proxy.json").read_text())
    assert report["rows"]["colour_fidelity"]["trajectories"] == 6
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
    assert list(rows) == ["reward_0"] and rows["reward_0"]["steps"] == 8


def test_progress_and_gains_given_directly_are_used_as_they_are():
    delta = torch.tensor([[0.1, 0.4, 0.2, 0.3, 0.0]])
    loaded = proxy.trajectories_from_dict({"delta_s": delta, "delta_r": 2 * delta, "reward_names": ["hps"]})
    rows = proxy.analyse(loaded)
    assert rows["hps"]["pearson"] == pytest.approx(1.0) and rows["hps"]["argmax_distance"] == 0


@pytest.mark.parametrize("content, message", [
    (b"garbage", "cannot read"),
    ({"latents": torch.zeros(2, 3, 4)}, "needs 'rewards'"),
    ({"rewards": torch.zeros(2, 3)}, "needs 'latents'"),
    ({"latents": torch.randn(2, 3, 4), "rewards": torch.zeros(2, 5)}, "'rewards' must be"),
    ({"delta_s": torch.zeros(2, 3), "delta_r": torch.zeros(3, 3)}, "do not match"),
    ({"latents": torch.randn(2, 3, 4), "rewards": torch.full((2, 3), float("nan"))}, "non-finite"),
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
    assert proxy.main(["--num-trajectories", "0", "--out", str(tmp_path)]) == 2
    assert "--num-trajectories" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
