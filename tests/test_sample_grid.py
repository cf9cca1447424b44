"""The sample grid (rows x prompts, labelled) and the samples a run keeps beside its log."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from otca_patch.sample_grid import sample_grid, wrap, font
from otca_patch.samples import SampleKeeper, read_kept, to_frames


def solid(colour, size=(32, 32)):
    return Image.new("RGB", size, colour)


def crop(grid, row, column):
    return np.asarray(grid.image.crop(grid.boxes[row, column]))


def test_cells_hold_their_images_where_the_labels_say():
    red, blue, green = solid((255, 0, 0)), solid((0, 0, 255)), solid((0, 255, 0))
    grid = sample_grid([("vanilla", [red, blue, None]), ("otca", [red, green, blue])],
                       ["a prompt", "another prompt", "a third, much longer prompt that has to wrap"],
                       groups=[("step 1", 1), ("step 20", 2)], cell=32)
    width, height = grid.image.size
    assert width >= 3 * 32 and height >= 2 * 32
    assert width <= 3 * 32 + 200 and height <= 2 * 32 + 120  # labels take a margin, not the picture
    for (row, column), (left, top, right, bottom) in grid.boxes.items():
        assert bottom - top == 32 and right - left == 32
        assert 0 <= left < right <= width and 0 <= top < bottom <= height
    assert grid.boxes[0, 0][1] == grid.boxes[0, 2][1] < grid.boxes[1, 0][1]  # rows below each other
    assert grid.boxes[0, 0][0] == grid.boxes[1, 0][0] < grid.boxes[0, 1][0] < grid.boxes[0, 2][0]
    # a same-sized image is pasted unchanged; equal images give equal cells, different ones differ
    assert np.array_equal(crop(grid, 0, 0), np.asarray(red))
    assert np.array_equal(crop(grid, 0, 0), crop(grid, 1, 0))
    assert not np.array_equal(crop(grid, 0, 1), crop(grid, 1, 1))
    missing = crop(grid, 0, 2)
    assert (missing == missing[0, 0]).all() and not np.array_equal(missing, crop(grid, 1, 2))
    # label strips are not blank (text is drawn left of the rows and above the columns)
    left_margin = np.asarray(grid.image.crop((0, grid.boxes[0, 0][1], grid.boxes[0, 0][0], grid.boxes[0, 0][3])))
    header = np.asarray(grid.image.crop((grid.boxes[0, 0][0], 0, width, grid.boxes[0, 0][1])))
    assert (left_margin < 128).any() and (header < 128).any()


def test_small_images_are_enlarged_sharply_and_wide_ones_widen_their_column():
    checker = Image.fromarray(np.kron(np.array([[0, 255], [255, 0]], dtype=np.uint8), np.ones((2, 2), np.uint8)))
    strip = solid((10, 20, 30), size=(96, 32))
    grid = sample_grid([("a", [checker, strip])], ["p", "q"], cell=64)
    cell = crop(grid, 0, 0)
    assert cell.shape[:2] == (64, 64) and set(np.unique(cell)) == {0, 255}  # nearest neighbour: no grey
    assert grid.boxes[0, 1][2] - grid.boxes[0, 1][0] == 192  # aspect kept: 96x32 at 64 high


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="row 'a' has 1 images for 2 columns"):
        sample_grid([("a", [solid((0, 0, 0))])], ["p", "q"])
    with pytest.raises(ValueError, match="column groups cover 1 columns of 2"):
        sample_grid([("a", [None, None])], ["p", "q"], groups=[("x", 1)])


def test_long_text_is_wrapped_within_its_width():
    face = font()
    lines = wrap("a photograph of a very small cat sitting on a large red sofa in the sun", 80, face, 3)
    assert len(lines) == 3 and lines[-1].endswith("…")
    assert all(face.getlength(line) <= 80 for line in lines)
    assert wrap("short", 80, face, 3) == ["short"]


def test_a_video_is_kept_as_a_strip_of_frames_from_start_to_end():
    video = torch.stack([torch.full((3, 8, 12), value) for value in (0.0, 0.25, 0.5, 0.75, 1.0)])  # [F, 3, H, W]
    frames = to_frames(video, 3)
    assert [np.asarray(f)[0, 0, 0] for f in frames] == [0, 128, 255]
    as_hwc = to_frames(video.permute(0, 2, 3, 1).numpy(), 3)  # DanceGRPO's [F, H, W, 3]
    assert [np.asarray(f)[0, 0, 0] for f in as_hwc] == [0, 128, 255]
    with pytest.raises(ValueError, match="got shape"):
        to_frames(torch.zeros(3, 8), 3)


def test_a_kept_video_is_one_png_of_its_frames_side_by_side(tmp_path):
    video = torch.stack([torch.full((3, 8, 12), value) for value in (0.0, 0.5, 1.0)])
    keeper = SampleKeeper(tmp_path)
    keeper.add([video], ["a kite"])
    keeper.end_step(1)
    kept = read_kept(tmp_path, "first")
    assert kept.frames == [3] and kept.prompts == ["a kite"]
    pixels = np.asarray(kept.images[0])[:, :, 0]
    assert pixels.shape[0] == 8 and pixels.shape[1] > 3 * 12  # three 12-pixel frames and the gaps between them
    assert pixels[0, 0] == 0 and pixels[0, -1] == 255 and 128 in pixels[0]


def test_the_keeper_writes_the_first_step_once_and_the_latest_every_step(tmp_path):
    keeper = SampleKeeper(tmp_path, count=3)
    for step, value in ((1, 0.0), (2, 0.5), (3, 1.0)):
        images = torch.full((4, 3, 8, 8), value)
        images[1] += 0.1 * (step - 1)
        keeper.add(images[:2], ["cat", "cat"])  # a group of one prompt, then other prompts
        keeper.add(images[2:], ["dog", "owl"])
        keeper.end_step(step)
    first, last = read_kept(tmp_path, "first"), read_kept(tmp_path, "last")
    assert first.step == 1 and last.step == 3
    assert first.prompts == last.prompts == ["cat", "dog", "owl"]  # distinct prompts first
    assert [np.asarray(i)[0, 0, 0] for i in first.images] == [0, 0, 0]
    assert [np.asarray(i)[0, 0, 0] for i in last.images] == [255, 255, 255]
    assert sorted(p.name for p in (tmp_path / "samples" / "last").iterdir()) == [
        "samples.json", "step3_0.png", "step3_1.png", "step3_2.png"]  # earlier steps' files are gone
    assert json.loads((tmp_path / "samples" / "first" / "samples.json").read_text())["frames"] == [1, 1, 1]


def test_the_keeper_keeps_the_latest_step_that_saw_the_first_steps_prompts_again(tmp_path):
    keeper = SampleKeeper(tmp_path, count=3)
    walk = [["cat", "cat", "dog"], ["owl", "owl", "owl"], ["dog", "cat", "cat"], ["emu", "emu", "emu"]]
    for step, prompts in enumerate(walk, start=1):
        images = torch.stack([torch.full((3, 8, 8), (step * 10 + index) / 255) for index in range(3)])
        keeper.add(images, prompts)
        keeper.end_step(step)
    first, again, last = (read_kept(tmp_path, which) for which in ("first", "again", "last"))
    assert (first.step, again.step, last.step) == (1, 3, 4)
    assert first.prompts == ["cat", "dog", "cat"]  # distinct prompts first
    assert again.prompts == first.prompts and last.prompts == ["emu", "emu", "emu"]
    # step 3's cats were its 2nd and 3rd samples, its dog its 1st: laid out in the first step's order
    assert [np.asarray(i)[0, 0, 0] for i in again.images] == [31, 30, 32]


def test_no_step_repeats_the_first_prompts_no_again_folder(tmp_path):
    keeper = SampleKeeper(tmp_path)
    for step, prompt in enumerate(["cat", "dog"], start=1):
        keeper.add(torch.zeros(2, 3, 8, 8), [prompt, prompt])
        keeper.end_step(step)
    assert read_kept(tmp_path, "again") is None and read_kept(tmp_path, "last").prompts == ["dog", "dog"]


def test_a_sample_the_keeper_cannot_show_stops_the_keeping_not_the_run(tmp_path, capsys):
    keeper = SampleKeeper(tmp_path)
    keeper.add([torch.zeros(2, 2)], ["odd"])
    keeper.add([torch.zeros(3, 4, 4)], ["fine"])
    keeper.end_step(1)
    assert "warning: no more samples are kept" in capsys.readouterr().err
    assert read_kept(tmp_path, "first") is None
