"""The SD smoke runs upstream's own HPS launch config, named ``hpsv2`` in the pinned DanceGRPO tree and
``hps`` in trees from before the rename (DanceGRPO's first release, DanceGRPO-kontext): the name the
smoke passes is one that tree's ``get_config`` knows."""
import importlib.util
import warnings

import pytest

from otca_patch.smoke.dancegrpo_sd import launch_config
from upstream_snapshots import missing, unpack_snapshot


@pytest.mark.parametrize("archive, name", [("DanceGRPO-15cc71d.tar.gz", "hpsv2"), ("DanceGRPO-93ec253.tar.gz", "hps")])
def test_the_launch_config_is_one_the_trees_get_config_knows(archive, name):
    tree = unpack_snapshot(archive)
    if tree is None:
        missing(f"no ../shared/upstream/{archive}")
    chosen = launch_config(tree)
    file, _, chosen_name = chosen.partition(":")
    assert (file, chosen_name) == ("fastvideo/config_sd/dgx.py", name)
    spec = importlib.util.spec_from_file_location(f"dgx_{name}", tree / file)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # upstream's `import imp`
        spec.loader.exec_module(module)
    config = module.get_config(chosen_name)  # a KeyError here is the smoke's failure on that tree
    assert config.sample.batch_size > 0
