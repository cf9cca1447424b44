"""``--otca_sync_grads`` on 2 gloo ranks (torchrun): Wan's gradient average has DDP's semantics.

Each rank trains a stand-in for Wan2.2's ``ExpertRouter`` (two experts, ``transformer`` and
``transformer_2``, one of them in bf16) through a real backward, on the experts its scenario names,
then calls the hook ``WanRuntime.synchronise_gradients``. The worker writes each rank's gradients
before and after; the expected mean is recomputed here from the ranks' own gradients before the
sync (``None`` counting as zeros), not from anything the layer computed."""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORKER = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.distributed as dist
    from torch import nn
    from otca_patch.config import OtcaConfig
    from otca_patch.targets import distributed
    from otca_patch.targets.registry import runtime_for

    out, bucket_bytes = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    distributed.GRADIENT_BUCKET_BYTES = bucket_bytes
    # ranks that touched different experts: which experts each rank's window reached
    SCENARIOS = {"disjoint": (["transformer"], ["transformer_2"]),
                 "one_rank_both": (["transformer", "transformer_2"], ["transformer_2"]),
                 "none_touch_second": (["transformer"], ["transformer"])}

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)  # the same replica on every rank
            self.transformer = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 4))
            self.transformer_2 = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 4)).to(torch.bfloat16)
            self.frozen = nn.Linear(6, 4).requires_grad_(False)

    def grads(model):
        return {n: None if p.grad is None else p.grad.float().tolist() for n, p in model.named_parameters()}

    runtime = runtime_for("dancegrpo-wan", OtcaConfig(otca=True, otca_sync_grads=True, otca_log_dir=os.path.join(out, "logs")))
    report = {}
    for scenario, touched in SCENARIOS.items():
        model = Experts()
        torch.manual_seed(100 + rank)  # each rank its own samples
        for name in touched[rank]:
            expert = getattr(model, name)
            x = torch.randn(3, 6, dtype=next(expert.parameters()).dtype)
            (expert(x).float() ** 2).sum().mul(1 + rank).backward()
        before = grads(model)
        runtime.synchronise_gradients(model)
        report[scenario] = {"before": before, "after": grads(model)}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()
''')


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_two_ranks(tmp_path, bucket_bytes: int) -> dict:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_free_port()), str(script), str(tmp_path), str(bucket_bytes)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return {rank: json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)}


# bucket sizes: DDP's 25 MB (one bucket per dtype), and 64 bytes (a bucket per tensor or two)
@pytest.mark.slow
@pytest.mark.parametrize("bucket_bytes", [25 * 1024 * 1024, 64])
def test_each_expert_gradient_is_its_own_mean_over_ranks_on_every_rank(tmp_path, bucket_bytes):
    ranks = run_two_ranks(tmp_path, bucket_bytes)
    for scenario in ("disjoint", "one_rank_both", "none_touch_second"):
        names = ranks[0][scenario]["before"].keys()
        for name in names:
            local = [ranks[r][scenario]["before"][name] for r in (0, 1)]
            after = [ranks[r][scenario]["after"][name] for r in (0, 1)]
            if name.startswith("frozen") or all(g is None for g in local):
                # no rank has a gradient: none is made (DDP leaves it None too)
                assert after == [None, None], (scenario, name)
                continue
            shape = torch.tensor(next(g for g in local if g is not None)).shape
            expected = sum(torch.zeros(shape) if g is None else torch.tensor(g) for g in local) / 2
            tolerance = 2e-2 if name.startswith("transformer_2") else 1e-6  # bf16 expert: 8 bits of mantissa
            for r in (0, 1):
                assert after[r] is not None, f"{scenario}: rank {r} left {name} without a gradient"
                got = torch.tensor(after[r])
                assert torch.allclose(got, expected, rtol=tolerance, atol=tolerance * expected.abs().max()), \
                    (scenario, name, r, got, expected)
            assert torch.equal(torch.tensor(after[0]), torch.tensor(after[1])), f"{scenario}: {name} differs by rank"
    # the scenario the old sync mixed up: each expert's gradient is half of the one rank's that touched it
    disjoint = ranks[0]["disjoint"]
    first = torch.tensor(ranks[0]["disjoint"]["before"]["transformer.0.weight"])
    assert torch.allclose(torch.tensor(disjoint["after"]["transformer.0.weight"]), first / 2, atol=1e-6)
    second = torch.tensor(ranks[1]["disjoint"]["before"]["transformer_2.0.weight"])
    assert torch.allclose(torch.tensor(disjoint["after"]["transformer_2.0.weight"]), second / 2, rtol=2e-2,
                          atol=2e-2 * second.abs().max())


def test_a_world_of_one_leaves_the_gradients_alone(tmp_path):
    from otca_patch.config import OtcaConfig
    from otca_patch.targets.registry import runtime_for

    model = torch.nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    before = model.weight.grad.clone()
    runtime_for("dancegrpo-wan", OtcaConfig(otca=True, otca_sync_grads=True, otca_log_dir=str(tmp_path))).synchronise_gradients(model)
    assert torch.equal(model.weight.grad, before) and model.bias.grad is not None
