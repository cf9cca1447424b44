"""Every rank or none on the real trainers' smoke runs (2 processes, gloo): a rank without the layer,
or with another ``--otca_mode``, stops every patched rank before its first rollout, naming rank 1,
with no collective-mismatch abort. DanceGRPO under torchrun (the check runs when the smoke loads the
rewritten module into its process group); FlowGRPO under accelerate (it runs inside accelerate's
``init_process_group``)."""
import os
import re
import socket
import subprocess
import sys

import pytest

from free_port import free_port

from .conftest import REPO, SMOKE, accelerate_launch

pytestmark = pytest.mark.upstream

RANK1_WITHOUT_LAYER = "unset OTCA_PATCH_ARGS"
RANK1_OTHER_MODE = 'export OTCA_PATCH_ARGS="$OTCA_PATCH_ARGS --otca_mode sum"'


def run(launcher: list, no_python: str, rank1_setup: str, smoke_args: list, timeout: int = 600) -> subprocess.CompletedProcess:
    """``timeout``: the check's, the most it waits for every rank to register (it goes on as soon as
    they have); short only where a rank is meant to be missing."""
    command = [*launcher, no_python, "bash", "-c",
               f'if [ "$RANK" = 1 ]; then {rank1_setup}; fi; exec "{sys.executable}" "$@"', "rank", *SMOKE, *smoke_args]
    env = {**os.environ, "OTCA_PATCH_ARGS": f"--otca --otca_rank_check_timeout {timeout}", "WANDB_MODE": "disabled",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env, cwd=REPO)


def assert_both_ranks_stopped(done, named: str, rank0_codes, rank1_codes) -> None:
    """Exit codes: 2 from the check, -15 where torchrun's agent ended the rank first, 1 from gloo."""
    assert done.returncode != 0
    assert "smoke step" not in done.stdout and not re.search(r"losses \[", done.stdout)
    assert "mismatch" not in done.stderr and "EnforceNotMet" not in done.stderr, done.stderr[-3000:]
    assert named in done.stderr, done.stderr[-3000:]
    codes = {int(rank): int(code) for rank, code in
             re.findall(r"rank\s+: (\d) \(local_rank: \d\)\s+exitcode\s+: (-?\d+)", done.stderr)}
    assert codes.get(0) in rank0_codes and codes.get(1) in rank1_codes, done.stderr[-3000:]


def test_dancegrpo_rank_without_the_layer_stops_both_ranks(dancegrpo, tmp_path):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port())]
    done = run(launcher, "--no-python", RANK1_WITHOUT_LAYER, [str(dancegrpo), str(tmp_path / "out"), "--steps", "1"],
               timeout=5)
    # rank 1 waits in upstream's first collective until torchrun's agent ends it (or gloo sees rank 0 go)
    assert_both_ranks_stopped(done, "rank 1 (host ", rank0_codes=(2,), rank1_codes=(-15, 1))
    assert "did not register within 5 s" in done.stderr


def test_flowgrpo_ranks_with_different_modes_both_stop(flow_grpo, tmp_path):
    done = run(accelerate_launch(2), "--no_python", RANK1_OTHER_MODE,
               [str(flow_grpo), str(tmp_path / "out"), "--target", "flowgrpo-sd3"])
    host = socket.gethostname()
    line = f"rank 1 (host {host}) registered with different settings from rank 0 (host {host}): --otca_mode sum (rank 0: otca)"
    assert_both_ranks_stopped(done, line, rank0_codes=(2, -15), rank1_codes=(2, -15))
    assert 1 <= done.stderr.count("smoke: error:") <= done.stderr.count(line)  # each patched rank that stopped says it
