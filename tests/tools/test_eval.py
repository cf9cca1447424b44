"""`otca-patch eval` with a tiny FLUX pipeline, tiny reward checkpoints and DanceGRPO-layout checkpoints."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from otca_patch.evaluation.cli import main
from otca_patch.tiny_models.flux import build_tiny_flux, save_dancegrpo_checkpoint, tiny_transformer
from otca_patch.rewards import RewardSet, tiny

#: two table cells computed from the same weights agree within this: one unit of the table's 4th decimal
#: (each side rounded once) plus float32 rounding of the scores
TABLE_ROUNDING = 2e-4
HEADER = "| checkpoint | CLIP-T | Aesthetic | HPSv2.1 | PickScore | ImageReward |"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    base = build_tiny_flux(root / "flux")
    trained = tiny_transformer(0)
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    save_dancegrpo_checkpoint(trained, root / "outputs", step=10)
    save_dancegrpo_checkpoint(tiny_transformer(0), root / "outputs", step=20)  # the base weights, unchanged
    prompts = root / "prompts.txt"
    prompts.write_text("a red circle on a white background\n\na blue square in the snow\na green star at night\n")
    # registers the tiny open_clip / hpsv2 architectures in this process (eval runs in-process here)
    checkpoints, options = tiny.build_all(root / "rewards")
    ckpt = ",".join(f"{name}={path}" for name, path in checkpoints.items())
    opt = ",".join(f"{name}.{key}={value}" for name, entries in options.items() for key, value in entries.items())
    argv = ["--base", str(base), "--prompts", str(prompts), "--reward_ckpt", ckpt, "--reward_opt", opt,
            "--rewards", "clip_t,aesthetic,hpsv2,pickscore,imagereward", "--batch_size", "2", "--num_steps", "2",
            "--height", "32", "--width", "32", "--max_sequence_length", "16", "--seed", "7"]
    return {"root": root, "base": base, "argv": argv, "checkpoints": checkpoints, "options": options}


def table_rows(text):
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return {cells[0]: [float(c) for c in cells[1:]] for cells in rows if cells[0] != "checkpoint"}


def entry_times(cache_root):
    return {p.relative_to(cache_root): p.stat().st_mtime_ns for p in cache_root.glob("*/*.json")
            if p.name != "settings.json"}


def test_table_one_rows_per_checkpoint_and_a_resumed_run_recomputes_only_what_is_missing(setup, capsys):
    out = setup["root"] / "run"
    argv = setup["argv"] + ["--checkpoint", "base", "--checkpoint", str(setup["root"] / "outputs"), "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert HEADER in captured.out and "0 cached, 9 to compute" in captured.err
    first = table_rows(captured.out)
    assert list(first) == ["base", "checkpoint-10-0", "checkpoint-20-0"]
    # a checkpoint holding the base weights reproduces the base row; a changed one does not. The table
    # prints 4 decimals: the same weights, loaded another way, may round one unit apart on another CPU
    assert first["checkpoint-20-0"] == pytest.approx(first["base"], abs=TABLE_ROUNDING)
    assert first["checkpoint-10-0"] != pytest.approx(first["base"], abs=TABLE_ROUNDING)
    assert (out / "table.md").read_text().startswith(HEADER)
    results = json.loads((out / "results.json").read_text())
    assert len(results["checkpoints"]["checkpoint-10-0"]["per_prompt"]) == 3
    check_samples_grid(out, results, ["a red circle on a white background", "a blue square in the snow",
                                      "a green star at night"])

    cache = out / "cache"
    before = entry_times(cache)
    assert len(before) == 9
    victim = next(p for p in before if p.parent.name.startswith("checkpoint-10-0") and p.name == "00001.json")
    old_entry = json.loads((cache / victim).read_text())
    old_image = np.asarray(Image.open(cache / victim.with_suffix(".png")), dtype=np.int16)
    (cache / victim).unlink()

    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "8 cached, 1 to compute" in captured.err
    after = entry_times(cache)
    changed = {p for p in after if after[p] != before.get(p)}
    assert changed == {victim}
    new_entry = json.loads((cache / victim).read_text())
    # alone in its batch now (it was batched with prompt 0): same seed, and the same image up to the
    # float32 rounding of the transformer's batched matmuls (at most a few pixels one level apart).
    # Those pixels can move a tiny random reward model by ~1e-4, so the scores are checked against
    # their own images: each entry's scores are exactly what scoring its image alone gives (the
    # rewards score one image at a time, so the batch an image was generated in adds nothing more).
    assert new_entry["seed"] == old_entry["seed"] == 7 + 1
    new_image = np.asarray(Image.open(cache / victim.with_suffix(".png")), dtype=np.int16)
    flips = np.abs(new_image - old_image)
    assert flips.max() <= 1 and (flips > 0).mean() < 0.01
    rewards = RewardSet(list(old_entry["scores"]), checkpoints=setup["checkpoints"], options=setup["options"])
    prompt = "a blue square in the snow"
    for entry, image in ((old_entry, old_image), (new_entry, new_image)):
        scored = rewards.score([Image.fromarray(image.astype(np.uint8))], [prompt])
        assert dict(zip(scored.names, scored.scores[0].tolist())) == pytest.approx(entry["scores"], rel=1e-6, abs=1e-7)
    _close(table_rows(captured.out), first)


def check_samples_grid(out, results, prompts):
    """samples.png beside table.md (which shows it): rows base, checkpoint-10-0, checkpoint-20-0 (the
    base weights); each cell is the image its row scored for its column's prompt, enlarged."""
    from otca_patch.evaluation.cache import EntryCache
    from otca_patch.evaluation.cli import samples_grid

    assert "![samples](samples.png)" in (out / "table.md").read_text()
    labels = list(results["checkpoints"])
    caches = [EntryCache(Path(results["checkpoints"][label]["cache"]), {}) for label in labels]
    grid = samples_grid(labels, caches, prompts)
    written = np.asarray(Image.open(out / "samples.png").convert("RGB"))
    assert np.array_equal(written, np.asarray(grid.image))
    assert sorted(grid.boxes) == [(row, c) for row in range(3) for c in range(3)]
    cell = {key: written[top:bottom, left:right] for key, (left, top, right, bottom) in grid.boxes.items()}
    for c in range(3):
        source = np.asarray(Image.open(caches[0].image(c)).convert("RGB"))  # 32 x 32
        block = cell[0, c].shape[0] // source.shape[0]
        assert np.array_equal(cell[0, c], np.kron(source, np.ones((block, block, 1), dtype=np.uint8)))
        assert np.array_equal(cell[0, c], cell[2, c])  # the base weights again: the same picture
        assert not np.array_equal(cell[0, c], cell[1, c])  # trained weights: another picture
    assert not np.array_equal(cell[0, 0], cell[0, 1])  # another prompt and seed: another picture


def _close(rows, reference):
    assert list(rows) == list(reference)
    for label in rows:
        assert rows[label] == pytest.approx(reference[label], abs=TABLE_ROUNDING), label


def test_a_changed_checkpoint_file_gets_a_new_cache(setup, capsys, tmp_path):
    outputs = tmp_path / "outputs"
    folder = save_dancegrpo_checkpoint(tiny_transformer(0), outputs, step=5)
    argv = setup["argv"] + ["--checkpoint", str(folder), "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    assert "3 to compute" in capsys.readouterr().err
    save_dancegrpo_checkpoint(tiny_transformer(1), outputs, step=5)  # overwritten in place
    assert main(argv) == 0
    assert "0 cached, 3 to compute" in capsys.readouterr().err
    assert len(list((tmp_path / "run" / "cache").glob("checkpoint-5-0-*"))) == 2


def test_bad_inputs_are_named(setup, capsys, tmp_path):
    broken = tmp_path / "checkpoint-1-0"
    broken.mkdir()
    (broken / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    assert main(setup["argv"] + ["--checkpoint", str(broken), "--out", str(tmp_path / "o")]) == 2
    assert re.search(r"checkpoint-1-0: has diffusion_pytorch_model.safetensors but no config.json",
                     capsys.readouterr().err)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    argv = [a if a != str(setup["root"] / "prompts.txt") else str(empty) for a in setup["argv"]]
    assert main(argv + ["--checkpoint", "base", "--out", str(tmp_path / "o")]) == 2
    assert "no prompts" in capsys.readouterr().err
    assert main(setup["argv"] + ["--checkpoint", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_truncated_checkpoint_is_named_without_a_traceback(setup, capsys, tmp_path):
    folder = save_dancegrpo_checkpoint(tiny_transformer(0), tmp_path / "outputs", step=3)
    weights = folder / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a save killed half way
    assert main(setup["argv"] + ["--checkpoint", str(folder), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{weights}: cannot be read as safetensors" in err and "Traceback" not in err


def test_stale_temporary_files_are_removed_when_the_cache_opens(tmp_path):
    from otca_patch.evaluation.cache import EntryCache

    folder = tmp_path / "cache" / "base-abc"
    folder.mkdir(parents=True)
    (folder / ".00001.json.x1y2.tmp").write_text('{"half')  # a write killed before its rename
    (folder / "00000.json").write_text('{"seed": 1}')
    cache = EntryCache(folder, {"seed": 1})
    assert sorted(p.name for p in folder.iterdir()) == ["00000.json", "settings.json"]
    assert cache.get(0) == {"seed": 1} and cache.get(1) is None


@pytest.fixture()
def no_pipeline(monkeypatch):
    """Any attempt to load the FLUX pipeline fails loudly: what is checked first must stop first."""
    import diffusers

    def refuse(*args, **kwargs):
        raise AssertionError("the pipeline was loaded before the inputs were checked")

    monkeypatch.setattr(diffusers.FluxPipeline, "from_pretrained", refuse)


@pytest.mark.parametrize("change, message", [
    ({"--rewards": "clip_tt,aesthetic"}, "--rewards: unknown reward 'clip_tt'; did you mean 'clip_t'?"),
    ({"--reward_ckpt": "clip_t=/no/such/clip.bin"}, "--reward_ckpt: /no/such/clip.bin does not exist"),
    ({"--reward_ckpt": "hpsv2=GARBAGE"}, "hpsv2"),  # a file that is there but no checkpoint: the model load says so
    ({"--reward_opt": "clip_t.no_such_option=1"}, "no_such_option"),
    ({"--height": "40"}, "--height must be a positive multiple of 16"),
    ({"--num_steps": "0"}, "--num_steps must be at least 1"),
])
def test_bad_input_is_refused_before_the_pipeline_loads(setup, tmp_path, capsys, no_pipeline, change, message):
    argv = list(setup["argv"]) + ["--checkpoint", "base", "--out", str(tmp_path / "out")]
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    for flag, value in change.items():
        value = value.replace("GARBAGE", str(garbage))
        if flag in ("--reward_ckpt", "--reward_opt"):
            argv += [flag, value]  # the later value of a reward wins
        else:
            argv[argv.index(flag) + 1] = value
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_eval_smoke_runs_end_to_end_from_the_command_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "eval", "--smoke", "--out", str(tmp_path / "e")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = table_rows(done.stdout)
    assert list(rows) == ["base", "checkpoint-10-0"] and rows["base"] != rows["checkpoint-10-0"]
    assert len(rows["base"]) == 5 and (tmp_path / "e" / "table.md").is_file()
    assert "samples.png" in done.stderr.splitlines()[-1]
    with Image.open(tmp_path / "e" / "samples.png") as grid:  # two checkpoints x three prompts of 32 px, enlarged
        assert grid.width >= 3 * 32 and grid.height >= 2 * 32
    assert "![samples](samples.png)" in (tmp_path / "e" / "table.md").read_text()
    refused = subprocess.run([sys.executable, "-m", "otca_patch.cli", "eval", "--smoke", "--base", "x"],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path,
                             env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert refused.returncode == 2 and "--smoke builds its own models and prompts; leave out --base" in refused.stderr
