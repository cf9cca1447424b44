"""The tiny reward checkpoints are replaced whole: two ranks of a smoke run build the same file in one
folder, and ``torch.save`` over the file another rank was reading truncated it under that rank
("PytorchStreamReader failed reading file data/7")."""
import os

import torch

from otca_patch.rewards import tiny


def test_a_checkpoint_built_again_while_a_rank_reads_it_leaves_that_rank_the_whole_file(tmp_path):
    first = tiny.build_hpsv2(tmp_path)
    reading = first.open("rb")  # a rank that opened the file and is still reading it
    size = first.stat().st_size
    again = tiny.build_hpsv2(tmp_path)  # the other rank builds it again meanwhile
    assert again == first
    # a new file took the name: the open one was never truncated or written over
    assert os.fstat(reading.fileno()).st_ino != again.stat().st_ino
    assert len(reading.read()) == size
    reading.close()
    assert [p.name for p in first.parent.iterdir()] == ["HPS_v2.1_compressed.pt"]  # no partial file left
    assert "state_dict" in torch.load(again, weights_only=True)


def test_every_single_file_checkpoint_is_replaced_whole(tmp_path):
    for build in (tiny.build_clip, tiny.build_aesthetic_head):
        path = build(tmp_path)
        reading = path.open("rb")
        assert build(tmp_path) == path
        assert os.fstat(reading.fileno()).st_ino != path.stat().st_ino, build.__name__
        reading.close()
        assert not [p for p in path.parent.iterdir() if p.name.endswith(".partial")]
