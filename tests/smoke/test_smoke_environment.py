"""The smoke harness's gloo stand-in for ``ReduceOp.AVG`` (torch 2.5 / 2.6 reject it on gloo): on two
ranks, an AVG all_reduce that gloo rejects becomes SUM / world size; other reductions are untouched."""
import os
import subprocess
import sys
import textwrap

from free_port import free_port

WORKER = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    calls = []
    native = dist.all_reduce

    def as_torch_2_5(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls.append(str(op))
        if op == dist.ReduceOp.AVG:
            raise RuntimeError("Cannot use ReduceOp.AVG with Gloo")  # torch 2.5's message
        return native(tensor, op=op, group=group, async_op=async_op)

    dist.all_reduce = as_torch_2_5
    from otca_patch.stand_ins.cpu import average_by_sum_on_gloo
    average_by_sum_on_gloo()
    average_by_sum_on_gloo()  # installing twice wraps once
    mean = torch.tensor([1.0 + 2 * rank, 10.0 * rank])
    dist.all_reduce(mean, op=dist.ReduceOp.AVG)
    second = torch.tensor([float(rank)])
    dist.all_reduce(second, op=dist.ReduceOp.AVG)  # gloo's answer is remembered: no second try
    total = torch.tensor([1.0 + rank])
    dist.all_reduce(total)
    largest = torch.tensor([float(rank)])
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(mean.tolist(), second.tolist(), total.tolist(), largest.tolist(), len(calls), flush=True)
    dist.destroy_process_group()
""")


def test_average_on_gloo_is_sum_over_world_size_where_gloo_rejects_avg(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(free_port()), str(script)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    # means of [1, 0] and [3, 10]; of 0 and 1; sum of 1 and 2; max of 0 and 1; calls: AVG tried once
    # (rejected), then SUM for each AVG, SUM, MAX
    assert done.stdout.split("\n")[-2] == "[2.0, 5.0] [0.5] [3.0] [1.0] 5"
