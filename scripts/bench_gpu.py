#!/usr/bin/env python
"""The credit's cost at the paper's scale on a GPU, against the work of one DanceGRPO step per group.

    python scripts/bench_gpu.py [--repeats 5] [--json out.json]      # needs CUDA
    python scripts/bench_gpu.py --tiny                                # CPU, tiny sizes (tests)

The work: a FLUX.1-sized transformer (diffusers' ``FluxTransformer2DModel`` with FLUX.1-dev's
configuration, random weights, bfloat16; no optimizer state, which would not fit one GPU) doing
what DanceGRPO's FLUX trainer does for one group of B = 12 samples (the paper's G) at 512x512
(1024 packed image tokens of 64 channels, 512 T5 tokens, 16 sampling steps): the rollout's B x 16
forward passes (one sample at a time, no grad, as upstream samples) and one forward+backward per
trained step (every step, as the paper trains: B x 16; batch 1 with gradient checkpointing, as
upstream trains). Each kind of pass is timed as the median of ``--repeats`` after a warm-up and
multiplied by its count (so the figure does not need minutes of device time per run).

Against it: the credit on the same device, on latents of the rollout's shape ``[12, 17, 1024, 64]``
in float32 (upstream keeps ``all_latents`` in float32) and K = 3 rewards: the runtime's own path
(TCD's progress where the latents are, then ``credit_from_progress``), in the default rules and with
each option (``fusion=group``, ``weight_scope=batch``, ``explore_center``, an explicit final state).
Printed: the credit's median time as a percentage of the step's work, and its peak extra device
memory (``max_memory_allocated`` above what was allocated before the call).

Without CUDA (and without ``--tiny``) it prints why and exits 0.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from otca_patch.credit import CreditConfig, credit_from_progress, similarity_to_final, step_progress  # noqa: E402

#: FLUX.1-dev as diffusers configures it (black-forest-labs/FLUX.1-dev, transformer/config.json).
FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))
TINY = dict(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=True,
            axes_dims_rope=(4, 4, 8))
#: (batch, sampling steps, image tokens, text tokens) of the paper's FLUX runs, and of --tiny
PAPER_SIZES = (12, 16, 1024, 512)
TINY_SIZES = (4, 4, 16, 8)
OPTIONS = {"default": {}, "fusion=group": {"fusion": "group"}, "weight_scope=batch": {"weight_scope": "batch"},
           "explore_center": {"explore_center": True}, "final_state=prediction": {}}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up (kernels, allocator, autotuning)
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def model_inputs(config: dict, image_tokens: int, text_tokens: int, device, dtype):
    """One sample's inputs as DanceGRPO's FLUX sampler builds them (batch 1, packed latents)."""
    side = int(image_tokens ** 0.5)
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    return dict(
        hidden_states=torch.randn(1, image_tokens, config["in_channels"], device=device, dtype=dtype),
        encoder_hidden_states=torch.randn(1, text_tokens, config["joint_attention_dim"], device=device, dtype=dtype),
        pooled_projections=torch.randn(1, config["pooled_projection_dim"], device=device, dtype=dtype),
        timestep=torch.full((1,), 0.5, device=device, dtype=dtype),
        guidance=torch.full((1,), 3.5, device=device, dtype=dtype),
        img_ids=img_ids.reshape(-1, 3).to(device, dtype), txt_ids=torch.zeros(text_tokens, 3, device=device, dtype=dtype),
        return_dict=False,
    )


def step_work(config: dict, sizes, repeats: int, device, dtype, checkpointing: bool) -> dict:
    """Seconds of one DanceGRPO step per group: rollout forwards + one forward+backward per trained step."""
    from diffusers import FluxTransformer2DModel

    batch, steps, image_tokens, text_tokens = sizes
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in bf16 directly: no float32 copy of 12 B parameters
    try:
        with torch.device(device):
            model = FluxTransformer2DModel(**config).to(dtype)
    finally:
        torch.set_default_dtype(default_dtype)
    if checkpointing:
        model.enable_gradient_checkpointing()
    inputs = model_inputs(config, image_tokens, text_tokens, device, dtype)

    def rollout_forward():
        with torch.no_grad():
            model(**inputs)

    def train_forward_backward():
        model(**inputs)[0].float().square().mean().backward()
        model.zero_grad(set_to_none=True)  # no optimizer state: the gradients are the only extra

    forward = median_seconds(rollout_forward, repeats, device)
    forward_backward = median_seconds(train_forward_backward, repeats, device)
    parameters = sum(p.numel() for p in model.parameters())
    del model
    return {"parameters": parameters, "forward_s": forward, "forward_backward_s": forward_backward,
            "rollout_s": batch * steps * forward, "train_s": batch * steps * forward_backward,
            "work_s": batch * steps * (forward + forward_backward)}


def credit_cost(sizes, objectives: int, repeats: int, device) -> dict:
    """Median seconds and peak extra memory of the credit, as the runtime computes it, per option."""
    batch, steps, image_tokens, _ = sizes
    gen = torch.Generator(device=device).manual_seed(0)
    latents = torch.randn(batch, steps + 1, image_tokens, 64, device=device, generator=gen)
    prediction = latents[:, -1] + 0.1 * torch.randn(latents[:, -1].shape, device=device, generator=gen)
    rewards = torch.randn(batch, objectives, device=device, generator=gen)
    group_ids = torch.zeros(batch, dtype=torch.int64, device=device)  # one group: B = G samples of a prompt
    results = {}
    for name, options in OPTIONS.items():
        config = CreditConfig(**options)
        final = prediction if name == "final_state=prediction" else None

        def credit():
            delta_s = step_progress(similarity_to_final(latents, final=final).double())
            return credit_from_progress(rewards, delta_s, group_ids, config).advantages

        seconds = median_seconds(credit, repeats, device)
        peak = None
        if device.type == "cuda":
            sync(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            credit()
            sync(device)
            peak = torch.cuda.max_memory_allocated(device) - before
        results[name] = {"seconds": seconds, "peak_extra_bytes": peak}
    results["latents_bytes"] = latents.numel() * latents.element_size()
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny model and sizes on the CPU (checks the script)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats of each pass (median)")
    parser.add_argument("--objectives", type=int, default=3)
    parser.add_argument("--no-checkpointing", action="store_true", help="train without gradient checkpointing")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    if args.tiny:
        torch.set_num_threads(1)  # tiny ops: thread start-up would dominate
        device, dtype, config, sizes = torch.device("cpu"), torch.float32, TINY, TINY_SIZES
    elif not torch.cuda.is_available():
        print("bench_gpu: no CUDA device here; nothing measured (run it where a GPU is lent, or use --tiny "
              "to check the script on the CPU)")
        return 0
    else:
        device, dtype, config, sizes = torch.device("cuda"), torch.bfloat16, FLUX_DEV, PAPER_SIZES
    batch, steps, image_tokens, text_tokens = sizes
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}; B={batch}, {steps} sampling steps, {image_tokens} image + {text_tokens} text tokens, "
          f"K={args.objectives}, {'tiny' if args.tiny else 'FLUX.1-dev'} transformer in {dtype}")

    credit = credit_cost(sizes, args.objectives, args.repeats, device)
    work = step_work(config, sizes, args.repeats, device, dtype, checkpointing=not args.no_checkpointing)
    print(f"transformer: {work['parameters'] / 1e9:.2f} B parameters; forward {work['forward_s'] * 1e3:.1f} ms, "
          f"forward+backward {work['forward_backward_s'] * 1e3:.1f} ms")
    print(f"one step per group: rollout {work['rollout_s']:.2f} s + training {work['train_s']:.2f} s "
          f"= {work['work_s']:.2f} s ({batch * steps} forwards, {batch * steps} forward+backward passes)")
    print(f"credit on latents {tuple((batch, steps + 1, image_tokens, 64))} float32 "
          f"({credit['latents_bytes'] / 2**20:.1f} MiB):")
    rows = {}
    for option in OPTIONS:
        seconds, peak = credit[option]["seconds"], credit[option]["peak_extra_bytes"]
        share = 100 * seconds / work["work_s"]
        rows[option] = {"seconds": seconds, "percent_of_step": share, "peak_extra_bytes": peak}
        memory = "n/a (CPU)" if peak is None else f"{peak / 2**20:.1f} MiB"
        print(f"  {option:<24} {seconds * 1e3:8.2f} ms  {share:8.4f} % of the step  peak extra {memory}")
    if args.json:
        args.json.write_text(json.dumps({"device": name, "sizes": dict(zip(("batch", "steps", "image_tokens",
                                                                             "text_tokens"), sizes)),
                                         "work": work, "credit": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
