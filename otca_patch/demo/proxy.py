"""``otca-patch proxy``: does TCD's latent progress ``dS`` track each step's real reward gain ``dR``?
(spec section 7, the paper's Table 5). Runs on the demo's base model by default, or on any saved
trajectory set (``--trajectories FILE.pt``).

Trajectory file format (``torch.save`` of a dict; loaded with ``weights_only=True``):

- ``latents``: ``[N, T+1, ...]`` float, each trajectory in sampling order (``z_0`` noise ... ``z_T``
  the final sample); ``dS`` is computed from it by the credit engine (cosine to ``z_T``).
  Alternatively ``delta_s``: ``[N, T]`` precomputed progress.
- ``rewards``: ``[N, T+1]`` or ``[N, T+1, K]``, the reward of the predicted clean sample
  ``x_hat_t = z_t - sigma_t v(z_t)`` decoded at every state t = 0..T (at ``t = T``, the sample);
  ``dR[:, t] = rewards[:, t] - rewards[:, t-1]``. Alternatively ``delta_r``: ``[N, T]`` or ``[N, T, K]``.
- ``reward_names`` (optional): K names for the reward columns.

Every metric is computed per trajectory and averaged; with K > 1 rewards a row is reported per
reward and one for their sum.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from otca_patch.proxy import METRIC_NAMES, PAPER_TABLE5, format_against_paper, proxy_metrics

from .cli import fail
from .config import DemoConfig, add_dataclass_flags, dataclass_from_args

DEFAULTS = {"out": "runs/proxy", "base_cache": "runs/demo", "sampling_steps": 16, "seed": 0}
#: Demo flags that mean nothing here (GRPO and evaluation sizes).
_UNUSED = ("modes", "grpo_steps", "prompts_per_step", "group_size", "init_same_noise", "timestep_fraction",
           "clip_range", "adv_clip_max", "learning_rate", "weight_decay", "max_grad_norm", "micro_batch",
           "grad_accum", "eval_every", "eval_prompts", "eval_samples_per_prompt", "eval_seed", "workers")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otca-patch proxy", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trajectories", default="", help="a saved trajectory set (format below); "
                        "default: sample the demo's base model")
    parser.add_argument("--num-trajectories", type=int, default=128, help="trajectories sampled from the demo model (default: 128)")
    parser.add_argument("--save-trajectories", default="", help="also save the demo trajectories in the file format below "
                        "(default: <out>/trajectories.pt)")
    add_dataclass_flags(parser, DemoConfig, skip=_UNUSED, defaults=DEFAULTS)
    return parser


# ----------------------------------------------------------------------------- trajectory sets

def load_trajectory_file(path) -> dict:
    """Read a trajectory set; returns ``delta_s [N, T]``, ``delta_r [N, T, K]`` and ``reward_names``.

    Raises ``ValueError`` naming the file and the key for anything missing or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--trajectories: no such file: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(f"--trajectories: cannot read {path} as a torch.save file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--trajectories: {path} holds a {type(data).__name__}, expected a dict (see --help)")
    return trajectories_from_dict(data, source=str(path))


def trajectories_from_dict(data: dict, source: str = "trajectories") -> dict:
    """The in-memory form of ``load_trajectory_file`` (same keys, same checks)."""
    from otca_patch.credit import similarity_to_final, step_progress

    def tensor(key):
        value = data[key]
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise ValueError(f"{source}: {key!r} must be a floating-point tensor, got {type(value).__name__}")
        if not torch.isfinite(value).all():
            raise ValueError(f"{source}: {key!r} contains non-finite values")
        return value

    if "delta_s" in data:
        delta_s = tensor("delta_s").double()
        if delta_s.dim() != 2:
            raise ValueError(f"{source}: 'delta_s' must be [N, T], got {tuple(delta_s.shape)}")
    elif "latents" in data:
        latents = tensor("latents")
        if latents.dim() < 3 or latents.shape[1] < 2:
            raise ValueError(f"{source}: 'latents' must be [N, T+1, ...] with T >= 1, got {tuple(latents.shape)}")
        delta_s = step_progress(similarity_to_final(latents).double())
    else:
        raise ValueError(f"{source}: needs 'latents' [N, T+1, ...] or 'delta_s' [N, T]; found keys {sorted(data)}")
    n, t = delta_s.shape
    if "delta_r" in data:
        delta_r = tensor("delta_r").double()
        expected = "[N, T]"
    elif "rewards" in data:
        rewards = tensor("rewards").double()
        if rewards.dim() not in (2, 3) or rewards.shape[:2] != (n, t + 1):
            raise ValueError(f"{source}: 'rewards' must be [N, T+1] or [N, T+1, K] = [{n}, {t + 1}(, K)], got {tuple(rewards.shape)}")
        delta_r = rewards[:, 1:] - rewards[:, :-1]
        expected = "[N, T+1]"
    else:
        raise ValueError(f"{source}: needs 'rewards' [N, T+1(, K)] or 'delta_r' [N, T(, K)]; found keys {sorted(data)}")
    if delta_r.dim() == 2:
        delta_r = delta_r.unsqueeze(-1)
    if delta_r.dim() != 3 or delta_r.shape[:2] != (n, t):
        raise ValueError(f"{source}: rewards do not match the {n} trajectories of {t} steps (expected {expected}(, K)), "
                         f"got dR of shape {tuple(delta_r.shape)}")
    names = data.get("reward_names") or [f"reward_{k}" for k in range(delta_r.shape[2])]
    if len(names) != delta_r.shape[2]:
        raise ValueError(f"{source}: {len(names)} reward_names for K = {delta_r.shape[2]} rewards")
    return {"delta_s": delta_s, "delta_r": delta_r, "reward_names": [str(x) for x in names]}


def demo_trajectories(config: DemoConfig, n: int, log=print) -> dict:
    """Sample ``n`` SDE trajectories of the demo's base model (random prompts from ``config.seed``) and
    score the predicted clean sample at every state; returns the file format's keys."""
    from .data import sample_prompts
    from .experiment import configure_torch
    from .model import unpack
    from .objectives import OBJECTIVES, objective_rewards
    from .pretrain import load_or_train_base_model
    from .sampling import sample_trajectories, sigma_schedule

    configure_torch(config)
    model, _ = load_or_train_base_model(config, log=log)
    generator = torch.Generator().manual_seed(config.seed)
    prompts = sample_prompts(n, generator)
    noise = torch.randn((n,) + model.token_shape, generator=generator)
    rollout = sample_trajectories(model, prompts, noise, sigma_schedule(config.sampling_steps, config.shift),
                                  config.eta, generator)
    states = rollout.clean.shape[1]
    images = unpack(rollout.clean.flatten(0, 1), config.image_size)  # [(N (T+1)), 3, H, W]
    rewards = objective_rewards(images, prompts.repeat_interleave(states, 0)).view(n, states, -1)
    return {"latents": rollout.latents, "rewards": rewards, "reward_names": list(OBJECTIVES),
            "prompt_ids": prompts, "sigmas": rollout.sigmas}


def analyse(trajectories: dict) -> dict:
    """``{label: proxy_metrics}``: one row per reward column, plus their sum when K > 1."""
    delta_s, delta_r, names = trajectories["delta_s"], trajectories["delta_r"], trajectories["reward_names"]
    rows = {name: proxy_metrics(delta_s, delta_r[..., k]) for k, name in enumerate(names)}
    if len(names) > 1:
        rows["sum of rewards"] = proxy_metrics(delta_s, delta_r.sum(dim=-1))
    return rows


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        if args.num_trajectories < 1:
            raise ValueError(f"--num-trajectories: must be >= 1, got {args.num_trajectories}")
        config = dataclass_from_args(DemoConfig, args)
    except ValueError as exc:
        return fail(parser.prog, str(exc))
    from .files import atomic_torch_save, atomic_write_json, atomic_write_text

    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    out = Path(config.out)
    try:
        if args.trajectories:
            trajectories = load_trajectory_file(args.trajectories)
            source = f"trajectory file `{args.trajectories}`"
        else:
            raw = demo_trajectories(config, args.num_trajectories, log=log)
            saved_to = Path(args.save_trajectories or out / "trajectories.pt")
            atomic_torch_save({k: raw[k] for k in ("latents", "rewards", "reward_names", "prompt_ids", "sigmas")}, saved_to)
            trajectories = trajectories_from_dict(raw, source="demo")
            source = (f"the demo's base model: {args.num_trajectories} SDE trajectories, {config.sampling_steps} steps, "
                      f"eta {config.eta}, shift {config.shift}, seed {config.seed} (saved to `{saved_to}`)")
        rows = analyse(trajectories)
    except (ValueError, OSError) as exc:
        return fail(parser.prog, str(exc), code=1)
    table = format_against_paper(rows)
    n, t = trajectories["delta_s"].shape
    command = " ".join(["otca-patch proxy"] + [shlex.quote(a) for a in argv])
    report = "\n".join([
        "# Proxy validity of TCD's progress (spec section 7, paper Table 5)", "",
        f"Command: `{command}`. Source: {source}; {n} trajectories x {t} steps.", "",
        "dS[t] = cos(z_t, z_T) - cos(z_{t-1}, z_T) against dR[t] = R(x_hat_t) - R(x_hat_{t-1}), per trajectory "
        "then averaged (higher is better except argmax_distance, in steps). Conventions: `otca_patch/proxy.py`.", "",
        table, "",
        "The paper's column is FLUX.1 with a learned preference reward; a column measured here is whatever model and "
        "rewards produced the trajectories (for the default, a 70k-parameter pixel-space model scored by pixel "
        "statistics), so compare how well dS tracks dR, not the digits.", "",
    ])
    atomic_write_json(out / "proxy.json", {"source": source, "paper": PAPER_TABLE5, "rows": rows, "metrics": list(METRIC_NAMES)})
    atomic_write_text(out / "proxy.md", report)
    print(table)
    print(f"\n{n} trajectories x {t} steps; wrote {out / 'proxy.md'} and {out / 'proxy.json'}")
    return 0
