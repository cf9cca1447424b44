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

from otca_patch.targets import rank_check
from otca_patch.config import OtcaConfig
from otca_patch.targets.rank_check import KEY_PREFIX, RankError, check_ranks
from free_port import free_port
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
    assert "slower than 0.5 s to get here (raise --otca_rank_check_timeout)" in message


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
    assert f"rank 1 (host node-b) registered with different settings from rank 0 (host node-a): {expected}" in str(caught.value)


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
        dist.barrier()  # both ranks end the gloo group together (torch 2.14's gloo may abort a rank at exit otherwise)
        dist.destroy_process_group()
''')

GATHERING_RUNTIME = textwrap.dedent('''\
    import torch
    from otca_patch.targets.distributed import gather_rows

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


def two_ranks(rank1_setup: str) -> str:
    """A launch line: torchrun starts 2 ranks; rank 1 first runs ``rank1_setup`` (shell) on the
    environment otca_run.sh gave it, as a node whose launch went differently would."""
    rank_script = f'if [ "$RANK" = 1 ]; then {rank1_setup}; fi; exec python "$@"'
    return (f"torchrun --nproc_per_node 2 --master_port {free_port()} --no-python "
            f"bash -c '{rank_script}' rank trainer/train.py --out result")


def run_two_ranks(dist_trainer, rank1_setup: str, timeout: str = "600"):
    """``timeout``: the most the check waits for every rank to register (it goes on as soon as they
    have); short only where a rank is meant to be missing, since a loaded machine may start one late."""
    upstream, env = dist_trainer
    started = time.monotonic()
    done = launch(upstream, env, two_ranks(rank1_setup), "--otca", "--otca_rank_check_timeout", timeout)
    return done, time.monotonic() - started


def exit_code(stderr: str, rank: int) -> int:
    """A rank's exit status from torchrun's failure report (-15: ended by the agent's SIGTERM)."""
    found = re.search(rf"rank\s+: {rank} \(local_rank: {rank}\)\s+exitcode\s+: (-?\d+)", stderr)
    assert found, f"torchrun reports no failure of rank {rank}:\n{stderr[-3000:]}"
    return int(found.group(1))


def assert_stopped_without_a_collective(done, upstream, torchrun_reports: bool = True):
    """Both ranks exited non-zero (2 from the check, or -15 where torchrun's agent ended a rank
    first; ``torchrun_reports=False``: the launch ended torchrun before its report), neither got past
    the check, and nothing aborted in a collective."""
    assert done.returncode != 0
    assert not list(upstream.glob("result.*")), "no rank may get past the check"
    for abort in ("mismatch", "EnforceNotMet", "[rank0]: Traceback"):
        assert abort not in done.stderr, done.stderr[-3000:]
    if torchrun_reports:
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
    # two guards race, and either stops the job before any collective: the launch's watch (rank 1's
    # Python never checked in with the layer; it ends torchrun before its failure report) or the rank
    # check (rank 1 never registered)
    if "never checked in with the layer" in done.stderr:
        assert_stopped_without_a_collective(done, upstream, torchrun_reports=False)
        assert "otca-patch launch: error: a Python process of this launch never checked in with the layer and has " \
               "loaded torch: pid " \
               in done.stderr and "trainer/train.py" in done.stderr
    else:
        assert_stopped_without_a_collective(done, upstream)
        assert exit_code(done.stderr, 0) == 2  # the patched rank stopped itself; the agent then ended rank 1
        # said by rank 0, and relayed once more as the launch's last line (the first error a process reported)
        assert done.stderr.count("rank 1 (host ") == 2 and "did not register within 3 s" in done.stderr
        assert "otca-patch launch: error: the launch failed; the first error a process reported (trainer/train.py, " \
               "rank 0, host " in done.stderr
        # the worker's messages carry the prefix of the command the user typed (`otca-patch launch:`)
        assert "otca-patch launch: error: the 2 ranks of this job do not all run the layer the same way" in done.stderr
    # start-up of two ranks takes up to minutes on a loaded machine; gloo alone would wait 30
    assert seconds < 600, "bounded by the check's timeout plus start-up, not by gloo's 30 minutes"


@pytest.mark.slow
def test_different_modes_stop_both_ranks_naming_the_difference(dist_trainer):
    upstream, _ = dist_trainer
    done, _ = run_two_ranks(dist_trainer, 'export OTCA_PATCH_ARGS="$OTCA_PATCH_ARGS --otca_mode sum"')
    assert_stopped_without_a_collective(done, upstream)
    host = socket.gethostname()
    # each patched rank stops with the same line (unless the agent ends it first, when the other stopped)
    line = (f"rank 1 (host {host}) registered with different settings from rank 0 (host {host}): "
            f"--otca_mode sum (rank 0: otca)")
    assert done.stderr.count(line) >= 1, done.stderr[-3000:]
    assert done.stderr.count("otca-patch launch: error:") == done.stderr.count(line)


# ---- every rank's B: the layer's gather needs the same number of rows on each rank

ROWS_WORKER = textwrap.dedent('''\
    import sys
    import torch
    import torch.distributed as dist
    from otca_patch.targets.distributed import gather_rows
    from otca_patch.targets.rank_check import RankError

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
                           str(free_port()), str(script), rows], capture_output=True, text=True, timeout=300, env=env)


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
    from otca_patch.targets import distributed

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


# ---- the window is the job's: from the first registration, as long as the process group waits

def test_the_window_counts_from_the_first_registration_not_this_ranks_arrival():
    """The first rank registered 1.5 s ago with a 2 s window: a rank arriving now waits the 0.5 s left."""
    store = dist.HashStore()
    registered(store, 0, verdict="")
    store.set(f"{KEY_PREFIX}/0/first", repr(time.time() - 1.5))
    started = time.monotonic()
    with pytest.raises(RankError, match=r"rank 2 \(host node-a, the node of rank \d\) did not register within 2 s of "
                                        r"the first rank's registration"):
        check_ranks(store, 1, 3, {**ENTRY, "local_rank": 1, "local_world_size": 3}, timeout=2)
    assert time.monotonic() - started < 1.5, "waited from its own arrival, not from the first registration"


def test_the_first_registration_is_kept_by_whoever_comes_first():
    store = dist.HashStore()
    first = rank_check.first_registration(store, "k")
    assert rank_check.first_registration(store, "k") == first  # a later rank reads the first one's time


def test_the_default_window_is_the_process_groups_timeout(monkeypatch):
    from datetime import timedelta

    monkeypatch.setattr(rank_check, "_pending", rank_check._Pending())
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: None)
    monkeypatch.setattr(dist.distributed_c10d, "init_process_group", dist.init_process_group)
    rank_check._wrap_init_process_group()
    dist.init_process_group("gloo", timeout=timedelta(seconds=42))  # is_initialized() stays False: no check runs
    assert rank_check.window() == 42
    rank_check._pending.timeout = 7.0  # --otca_rank_check_timeout wins
    assert rank_check.window() == 7
    rank_check._pending.timeout = rank_check._pending.group_timeout = None
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    assert rank_check.window() == 600  # torch's NCCL default, 10 minutes


LATE_RANK = textwrap.dedent('''\
    import sys, time
    from datetime import timedelta
    import torch.distributed as dist
    from otca_patch.targets import rank_check

    window, late = float(sys.argv[1]), float(sys.argv[2])
    explicit = float(sys.argv[3]) if len(sys.argv) > 3 else None
    rank_check._wrap_init_process_group()  # as arm() does when the runtime is installed
    dist.init_process_group("gloo", timeout=timedelta(seconds=window))  # gloo connects here: the ranks meet
    rank = dist.get_rank()
    if rank == 1:
        time.sleep(late)  # then rank 1 is slow to reach the check (a node still loading its models)
    entry = {"host": "h", "pid": 0, "layer": "x", "target": "t", "spec_sha256": "", "file_sha256": "",
             "flags": {}, "checkpoints": {}, "local_rank": rank, "local_world_size": 2}
    try:
        rank_check.arm(entry, explicit)  # the group exists: the check runs now
    except rank_check.RankError as exc:
        print(f"rank {rank} stopped: {exc}", flush=True)
        sys.exit(3)
    print(f"rank {rank} passed: {rank_check.result()}", flush=True)
''')


def run_late_rank(tmp_path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "late_rank.py"
    script.write_text(LATE_RANK)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(free_port()), str(script), *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_a_rank_late_by_one_and_a_half_short_windows_passes_within_the_groups_timeout(tmp_path):
    """Rank 1 reaches the check 6 s after rank 0: 1.5x a 4 s window (the old per-rank 120 s default
    stood in the same relation to a real job's cold-start lag). With the process group's 20 s as the
    window, as the trainer itself would wait, both pass; with --otca_rank_check_timeout 4, both stop
    and the message says rank 1 may just be slower than 4 s."""
    done = run_late_rank(tmp_path, "20", "6")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} passed: " in done.stdout and "'window_s': 20.0" in done.stdout
    done = run_late_rank(tmp_path, "20", "6", "4")
    assert done.returncode != 0
    assert "rank 0 stopped: " in done.stdout, done.stdout + done.stderr[-3000:]
    assert "did not register within 4 s of the first rank's registration" in done.stdout
    assert "slower than 4 s to get here (raise --otca_rank_check_timeout)" in done.stdout


# ---- which reward checkpoints a rank loaded: compared by content, shown with their paths

def test_the_entry_holds_each_registry_rewards_checkpoint_identity(tmp_path, monkeypatch):
    import hashlib

    data = bytes(range(256)) * 6144  # 1.5 MiB
    checkpoint = tmp_path / "clip.safetensors"
    checkpoint.write_bytes(data)
    monkeypatch.delenv("OTCA_CKPT_CLIP_T", raising=False)
    config = OtcaConfig(otca=True, otca_rewards=("upstream", "clip_t"), otca_reward_ckpt={"clip_t": str(checkpoint)})
    entry = rank_check.entry(config, SPEC_STUB, __file__)
    assert entry["checkpoints"] == {"clip_t": {"path": str(checkpoint), "size": len(data),
                                               "sha256": hashlib.sha256(data).hexdigest()}}
    assert "otca_reward_ckpt" not in entry["flags"]  # a node-local path: the content is compared instead
    monkeypatch.setenv("OTCA_CKPT_CLIP_T", str(checkpoint))  # the same file through the variable: the same identity
    assert rank_check.entry(OtcaConfig(otca=True, otca_rewards=("clip_t",)), SPEC_STUB, __file__)["checkpoints"] \
        == entry["checkpoints"]


def test_two_files_of_one_size_that_differ_after_the_first_mib_are_different_rewards(tmp_path):
    from otca_patch.rewards.checkpoints import identity

    head = bytes(range(256)) * 4096  # 1 MiB the two share
    v20, v21 = tmp_path / "hps_v2.0.pt", tmp_path / "hps_v2.1.pt"
    v20.write_bytes(head + b"\x00" * 4096)
    v21.write_bytes(head + b"\x00" * 4095 + b"\x01")  # the last byte differs: a fine-tuned head
    mine, theirs = identity(v20), identity(v21)
    assert mine["size"] == theirs["size"] and mine["sha256"] != theirs["sha256"]
    store = dist.HashStore()
    registered(store, 1, host="node-b", checkpoints={"hpsv2": theirs})
    with pytest.raises(RankError) as caught:
        check_ranks(store, 0, 2, {**ENTRY, "checkpoints": {"hpsv2": mine}}, timeout=5)
    assert f"reward checkpoint hpsv2 {v21} ({len(head) + 4096} bytes, sha256 {theirs['sha256'][:12]})" in str(caught.value)


def test_a_file_changed_in_place_is_hashed_again(tmp_path):
    from otca_patch.rewards.checkpoints import identity

    checkpoint = tmp_path / "head.pt"
    checkpoint.write_bytes(b"a" * 100)
    before = identity(checkpoint)["sha256"]
    assert identity(checkpoint)["sha256"] == before  # the second call reads the process's cache
    checkpoint.write_bytes(b"b" * 100)
    os.utime(checkpoint, ns=(1, 1))  # another modification time even on a coarse clock
    assert identity(checkpoint)["sha256"] != before


def test_the_same_file_at_two_paths_given_as_an_option_is_the_same_reward(tmp_path, monkeypatch):
    """The README's form `--otca_reward_opt aesthetic.clip_checkpoint=PATH`, each node holding the file
    at its own path: one setting, compared by content."""
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    for node in (node_a, node_b):
        node.mkdir()
        (node / "ViT-L-14.pt").write_bytes(b"clip weights" * 1000)
        (node / "head.pth").write_bytes(b"head weights" * 100)
    monkeypatch.delenv("OTCA_CKPT_AESTHETIC", raising=False)
    monkeypatch.delenv("OTCA_CKPT_AESTHETIC_CLIP", raising=False)

    def entry_on(node, clip_bytes=None):
        if clip_bytes is not None:
            (node / "ViT-L-14.pt").write_bytes(clip_bytes)
        config = OtcaConfig(otca=True, otca_rewards=("aesthetic",), otca_reward_ckpt={"aesthetic": str(node / "head.pth")},
                            otca_reward_opt={"aesthetic": {"clip_checkpoint": str(node / "ViT-L-14.pt")}})
        return {**ENTRY, **{k: v for k, v in rank_check.entry(config, SPEC_STUB, __file__).items()
                            if k in ("flags", "checkpoints")}}

    mine, theirs = entry_on(node_a), entry_on(node_b)
    store = dist.HashStore()
    registered(store, 1, **{k: theirs[k] for k in ("flags", "checkpoints")}, host="node-b")
    assert check_ranks(store, 0, 2, mine, timeout=5)["world_size"] == 2
    theirs = entry_on(node_b, b"other clip" * 1000)
    store = dist.HashStore()
    registered(store, 1, **{k: theirs[k] for k in ("flags", "checkpoints")}, host="node-b")
    with pytest.raises(RankError) as caught:
        check_ranks(store, 0, 2, mine, timeout=5)
    assert f"reward checkpoint aesthetic.clip_checkpoint {node_b / 'ViT-L-14.pt'}" in str(caught.value)
    assert "--otca_reward_opt" not in str(caught.value)


def test_ranks_with_different_checkpoint_files_stop_naming_both_paths():
    mine = {"clip_t": {"path": "/node-a/clip.pt", "size": 10, "sha256": "a" * 64}}
    store = dist.HashStore()
    registered(store, 1, host="node-b", checkpoints={"clip_t": {"path": "/node-b/clip.pt", "size": 10,
                                                                 "sha256": "b" * 64}})
    with pytest.raises(RankError) as caught:
        check_ranks(store, 0, 2, {**ENTRY, "checkpoints": mine}, timeout=5)
    assert ("rank 1 (host node-b) registered with different settings from rank 0 (host node-a): reward checkpoint "
            "clip_t /node-b/clip.pt (10 bytes, sha256 bbbbbbbbbbbb) (rank 0: /node-a/clip.pt "
            "(10 bytes, sha256 aaaaaaaaaaaa))") in str(caught.value)
    store = dist.HashStore()  # the same content at another path passes
    registered(store, 1, host="node-b", checkpoints={"clip_t": {**mine["clip_t"], "path": "/node-b/clip.pt"}})
    assert check_ranks(store, 0, 2, {**ENTRY, "checkpoints": mine}, timeout=5)["world_size"] == 2
