"""Every rank or none: a job whose ranks do not all run the layer the same way stops on every patched
rank before its first rollout, naming the ranks, and never enters a mismatched collective.

The comparison itself is tested on an in-process store; the launch path under ``torchrun
--nproc_per_node 2`` (gloo) on a synthetic upstream trainer that makes its own collectives, with a
runtime that makes the layer's (``distributed.gather_rows``, as the real runtimes' credit does)."""
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.distributed as dist

from otca_patch import rank_check
from otca_patch.config import OtcaConfig
from otca_patch.rank_check import KEY_PREFIX, RankError, check_ranks
from test_launch import REPO, launch, synthetic_upstream

ENTRY = {"host": "node-a", "pid": 1, "layer": "0.1.0", "target": "dancegrpo-flux", "spec_sha256": "s1",
         "file_sha256": "f1", "flags": {"otca": True, "otca_mode": "otca"}, "local_rank": 0, "local_world_size": 2}


def registered(store, rank: int, verdict: str = "go", **changes) -> None:
    """What another rank's check writes: its entry, then whether it goes on (``""``: not yet)."""
    store.set(f"{KEY_PREFIX}/0/{rank}", json.dumps({**ENTRY, "rank": rank, **changes}))
    if verdict:
        store.set(f"{KEY_PREFIX}/0/verdict/{rank}", verdict)


def test_equal_ranks_pass_and_the_summary_names_their_hosts():
    store = dist.HashStore()
    registered(store, 1, host="node-b", local_rank=1)
    summary = check_ranks(store, 0, 2, ENTRY, timeout=5)
    assert summary["world_size"] == 2 and summary["hosts"] == {"0": "node-a", "1": "node-b"}
    assert summary["seconds"] < 5


def test_a_rank_that_never_registers_stops_the_check_after_the_timeout():
    store = dist.HashStore()
    registered(store, 2, host="node-b", local_rank=0)  # ranks 2, 3 on node-b; rank 3 is missing, rank 1 too
    started = time.monotonic()
    with pytest.raises(RankError) as caught:
        check_ranks(store, 0, 4, ENTRY, timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 5
    message = str(caught.value)
    assert "rank 1 (host node-a, the node of rank 0) did not register within 0.5 s" in message
    assert "rank 3 (host node-b, the node of rank 2) did not register" in message
    assert "rank 2" not in message.replace("the node of rank 2", "")  # rank 2 registered and agrees


@pytest.mark.parametrize("verdict", ["stop", ""])
def test_a_rank_that_stops_or_falls_silent_after_registering_stops_the_others(verdict):
    """Rank 1's wait ran out just as this rank registered (it wrote "stop"), or it never says: rank 0
    must not go on alone into the trainer's collectives."""
    store = dist.HashStore()
    registered(store, 1, verdict=verdict, host="node-b", local_rank=1)
    with pytest.raises(RankError, match=r"rank 1 \(host node-b\) stopped at this check \(see its error\)"):
        check_ranks(store, 0, 2, ENTRY, timeout=0.3)


def test_a_whole_node_missing_is_named_with_its_ranks():
    store = dist.HashStore()
    registered(store, 1, local_rank=1)
    with pytest.raises(RankError, match=r"ranks 2, 3 \(host unknown: no rank of its node registered\) did not "
                                        r"register within 0.2 s"):
        check_ranks(store, 0, 4, ENTRY, timeout=0.2)
    store = dist.HashStore()  # 2 nodes of 8: the second node's launch skipped the wrapper
    for rank in range(1, 8):
        registered(store, rank, local_rank=rank, local_world_size=8)
    with pytest.raises(RankError, match=r"\n  ranks 8-15 \(host unknown: no rank of its node registered\) did not"):
        check_ranks(store, 0, 16, {**ENTRY, "local_world_size": 8}, timeout=0.2)


@pytest.mark.parametrize("changes, expected", [
    ({"flags": {"otca": True, "otca_mode": "sum"}}, "--otca_mode sum (rank 0: otca)"),
    ({"flags": {"otca": True, "otca_mode": "otca", "otca_w_min": 0.2}}, "--otca_w_min 0.2 (rank 0: (not given))"),
    ({"file_sha256": "f2"}, "upstream file sha256 f2 (rank 0: f1)"),
    ({"spec_sha256": "s2"}, "spec sha256 s2 (rank 0: s1)"),
    ({"layer": "0.0.9"}, "otca-patch version 0.0.9 (rank 0: 0.1.0)"),
])
def test_a_different_rank_is_named_with_its_host_and_what_differs(changes, expected):
    store = dist.HashStore()
    registered(store, 1, host="node-b", **changes)
    with pytest.raises(RankError) as caught:
        check_ranks(store, 0, 2, ENTRY, timeout=5)
    assert f"rank 1 (host node-b) differs from rank 0 (host node-a): {expected}" in str(caught.value)


def test_node_local_flags_may_differ_and_are_not_compared():
    config = OtcaConfig(otca=True, otca_log_dir="/node/local", otca_rank_check_timeout=7)
    assert not set(rank_check.LOCAL_FLAGS) & set(rank_check.entry(config, SPEC_STUB, __file__)["flags"])
    assert rank_check.entry(config, SPEC_STUB, __file__)["flags"]["otca"] is True


class SPEC_STUB:
    name, path = "synthetic-trainer", ""


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_the_timeout_flag_must_be_positive(value):
    from otca_patch.config import parse_otca_args

    with pytest.raises(ValueError, match="--otca_rank_check_timeout"):
        parse_otca_args(["--otca", "--otca_rank_check_timeout", value])


# ---- the launch: torchrun --nproc_per_node 2 on gloo, through scripts/otca_run.sh

DIST_TRAINER = textwrap.dedent('''\
    import json, sys
    import torch
    import torch.distributed as dist

    def advantages_for(rewards):
        advantages = [r - sum(rewards) / len(rewards) for r in rewards]
        return advantages

    if __name__ == "__main__":
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        rewards = [float(rank), 2.0, 6.0]
        parts = [torch.zeros(3) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, torch.tensor(rewards))  # upstream's own collective: every rank makes it
        advantages = advantages_for(rewards)
        dist.barrier()
        out = sys.argv[sys.argv.index("--out") + 1]
        with open(f"{out}.{rank}", "w") as handle:
            json.dump({"advantages": advantages}, handle)
''')

GATHERING_RUNTIME = textwrap.dedent('''\
    import torch
    from otca_patch.distributed import gather_rows

    class Runtime:
        def __init__(self, config, spec):
            pass
        def describe(self):
            return "synthetic, gathers like the credit"
        def scale(self, values):
            gather_rows(torch.tensor(values)[:, None])  # the layer's own collective
            return [2.0 * v for v in values]
''')


@pytest.fixture()
def dist_trainer(tmp_path):
    return synthetic_upstream(tmp_path, DIST_TRAINER, GATHERING_RUNTIME)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_ranks(rank1_setup: str) -> str:
    """A launch line: torchrun starts 2 ranks; rank 1 first runs ``rank1_setup`` (shell) on the
    environment otca_run.sh gave it, as a node whose launch went differently would."""
    rank_script = f'if [ "$RANK" = 1 ]; then {rank1_setup}; fi; exec python "$@"'
    return (f"torchrun --nproc_per_node 2 --master_port {_free_port()} --no-python "
            f"bash -c '{rank_script}' rank trainer/train.py --out result")


def run_two_ranks(dist_trainer, rank1_setup: str, timeout: str = "60"):
    """``timeout``: short only where a rank is meant to be missing (a loaded machine may start one late)."""
    upstream, env = dist_trainer
    started = time.monotonic()
    done = launch(upstream, env, two_ranks(rank1_setup), "--otca", "--otca_rank_check_timeout", timeout)
    return done, time.monotonic() - started


def exit_code(stderr: str, rank: int) -> int:
    """A rank's exit status from torchrun's failure report (-15: ended by the agent's SIGTERM)."""
    found = re.search(rf"rank\s+: {rank} \(local_rank: {rank}\)\s+exitcode\s+: (-?\d+)", stderr)
    assert found, f"torchrun reports no failure of rank {rank}:\n{stderr[-3000:]}"
    return int(found.group(1))


def assert_stopped_without_a_collective(done, upstream):
    """Both ranks exited non-zero (2 from the check, or -15 where torchrun's agent ended a rank
    first), neither got past the check, and nothing aborted in a collective."""
    assert done.returncode != 0
    assert not list(upstream.glob("result.*")), "no rank may get past the check"
    for abort in ("mismatch", "EnforceNotMet", "[rank0]: Traceback"):
        assert abort not in done.stderr, done.stderr[-3000:]
    assert exit_code(done.stderr, 0) in (2, -15) and exit_code(done.stderr, 1) != 0


@pytest.mark.slow
def test_same_flags_on_both_ranks_pass_the_check(dist_trainer):
    upstream, _ = dist_trainer
    done, _ = run_two_ranks(dist_trainer, ":")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "all 2 ranks run the same layer, target, spec, upstream file and flags" in done.stderr
    for rank in (0, 1):  # both ranks ran the rewritten script (the hook doubles upstream's advantages)
        rewards = [float(rank), 2.0, 6.0]
        expected = [2 * (r - sum(rewards) / 3) for r in rewards]
        assert json.loads((upstream / f"result.{rank}").read_text())["advantages"] == pytest.approx(expected)


@pytest.mark.slow
def test_a_rank_without_the_layer_stops_every_rank_within_the_timeout(dist_trainer):
    upstream, _ = dist_trainer
    done, seconds = run_two_ranks(dist_trainer, "unset OTCA_PATCH_ARGS", timeout="3")
    assert_stopped_without_a_collective(done, upstream)
    assert exit_code(done.stderr, 0) == 2  # the patched rank stopped itself; the agent then ended rank 1
    assert done.stderr.count("rank 1 (host ") == 1 and "did not register within 3 s" in done.stderr
    # the worker's messages carry the prefix of the command the user typed (`otca-patch launch:`)
    assert "otca-patch launch: error: the 2 ranks of this job do not all run the layer the same way" in done.stderr
    assert seconds < 120, "bounded by the check's timeout plus start-up, not by gloo's 30 minutes"


@pytest.mark.slow
def test_different_modes_stop_both_ranks_naming_the_difference(dist_trainer):
    upstream, _ = dist_trainer
    done, _ = run_two_ranks(dist_trainer, 'export OTCA_PATCH_ARGS="$OTCA_PATCH_ARGS --otca_mode sum"')
    assert_stopped_without_a_collective(done, upstream)
    host = socket.gethostname()
    # each patched rank stops with the same line (unless the agent ends it first, when the other stopped)
    line = f"rank 1 (host {host}) differs from rank 0 (host {host}): --otca_mode sum (rank 0: otca)"
    assert done.stderr.count(line) >= 1, done.stderr[-3000:]
    assert done.stderr.count("otca-patch launch: error:") == done.stderr.count(line)


# ---- every rank's B: the layer's gather needs the same number of rows on each rank

ROWS_WORKER = textwrap.dedent('''\
    import sys
    import torch
    import torch.distributed as dist
    from otca_patch.distributed import gather_rows
    from otca_patch.rank_check import RankError

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rows = [int(n) for n in sys.argv[1].split(",")][rank]
    try:
        gathered = gather_rows(torch.full((rows, 2), float(rank)))
    except RankError as exc:
        print(f"rank {rank} stopped: {exc}", flush=True)
        sys.exit(3)
    print(f"rank {rank} gathered {gathered[:, 0].tolist()}", flush=True)
    dist.destroy_process_group()
''')


def run_rows(tmp_path, rows: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rows.py"
    script.write_text(ROWS_WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_free_port()), str(script), rows], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_ranks_with_different_batch_sizes_stop_naming_each_rank_and_size(tmp_path):
    done = run_rows(tmp_path, "2,3")
    assert done.returncode != 0
    for rank in (0, 1):
        assert f"rank {rank} stopped: the ranks hold different numbers of samples (rank 0: 2 rows; rank 1: 3 rows)" \
            in done.stdout, done.stdout + done.stderr[-3000:]
    assert "mismatch" not in done.stderr
    done = run_rows(tmp_path, "2,2")  # equal B: checked, then gathered in rank order
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 gathered [0.0, 0.0, 1.0, 1.0]" in done.stdout


def test_without_the_launcher_layout_the_missing_host_is_unknown():
    store = dist.HashStore()
    with pytest.raises(RankError, match=r"rank 1 \(host unknown\) did not register"):
        check_ranks(store, 0, 2, {**ENTRY, "local_rank": None, "local_world_size": None}, timeout=0.2)


def test_after_a_failed_check_every_later_collective_of_the_layer_refuses(monkeypatch):
    """Should upstream catch the error and go on, the layer's gather still never runs."""
    from otca_patch import distributed

    monkeypatch.setattr(rank_check, "_pending", rank_check._Pending())
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    store = dist.HashStore()
    monkeypatch.setattr(rank_check, "default_store", lambda: (store, "a test store"))
    monkeypatch.setattr(dist, "all_gather", lambda *a, **k: pytest.fail("a collective after a failed check"))
    rank_check._pending.entry, rank_check._pending.timeout = ENTRY, 0.2
    with pytest.raises(RankError, match="rank 1 .* did not register"):
        rank_check.ensure()
    registered(store, 1)  # too late: this rank has stopped, whatever the store says now
    with pytest.raises(RankError, match="rank 1 .* did not register"):
        distributed.gather_rows(torch.zeros(2, 1))
