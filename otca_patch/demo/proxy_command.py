"""``otca-patch proxy``: does TCD's latent progress ``dS`` track each step's real reward gain ``dR``,
and does it do better than trajectory-blind controls? (docs/credit.md 7, the paper's Table 5). Runs on
the demo's base model by default, or on any saved trajectory set (``--trajectories FILE.pt``).

Trajectory file format (``torch.save`` of a dict; loaded with ``weights_only=True``):

- ``latents``: ``[N, T+1, ...]`` float, each trajectory in sampling order (``z_0`` noise ... ``z_T``
  the final latent); ``dS`` is computed from it by the credit engine (cosine to ``z_T``).
  Alternatively ``delta_s``: ``[N, T]`` precomputed progress.
- ``rewards``: ``[N, T+1]`` or ``[N, T+1, K]``, the reward of each state t = 0..T, the last being the
  image the trainer scores; ``dR[:, t] = rewards[:, t] - rewards[:, t-1]``. Alternatively
  ``delta_r``: ``[N, T]`` or ``[N, T, K]``. ``rewards_latent`` (same shape) adds the second
  definition of dR (the latent ``z_t`` itself decoded; ``rewards`` is then the predicted clean sample).
- ``sigmas`` (optional): ``[T+1]`` the schedule in sampling order, for the ``sigma_decrement`` control.
- ``reward_names`` (optional): K names for the reward columns.

With K > 1 rewards, dR is their sum (the trainer's total). Rows: ``dS`` and the controls
``mean_dS_profile`` and ``sigma_decrement``, for each definition of dR; ``residual_pearson``: dS
against dR after removing each step's mean over trajectories.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..help_text import PlainDescriptionFormatter

from .cli import fail, parse
from otca_patch.flags import add_flags, from_namespace

from .config import DemoConfig

DEFAULTS = {"out": "runs/proxy", "base_cache": "runs/demo", "sampling_steps": 16}
#: Demo flags that mean nothing here (GRPO and evaluation sizes).
_UNUSED = ("modes", "seeds", "grpo_steps", "prompts_per_step", "group_size", "init_same_noise", "timestep_fraction",
           "clip_range", "adv_clip_max", "learning_rate", "weight_decay", "max_grad_norm", "micro_batch",
           "grad_accum", "eval_every", "eval_prompts", "eval_samples_per_prompt", "eval_seed", "workers")
#: dR definitions (docs/credit.md 7): the predicted clean sample of each state, or the latent itself.
DEFINITIONS = {"rewards": "prediction", "rewards_latent": "latent"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otca-patch proxy", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=PlainDescriptionFormatter,
    )
    parser.add_argument("--trajectories", default="", help="a saved trajectory set (format below); "
                        "default: sample the demo's base model")
    parser.add_argument("--num_trajectories", type=int, default=128, help="trajectories sampled from the demo model (default: 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the demo trajectories' prompts and noise (default: 0)")
    parser.add_argument("--save_trajectories", default="", help="also save the demo trajectories in the file format below "
                        "(default: <out>/trajectories.pt)")
    add_flags(parser, DemoConfig, skip=_UNUSED, defaults=DEFAULTS)
    return parser


# ----------------------------------------------------------------------------- trajectory sets

def load_trajectory_file(path) -> dict:
    """Read a trajectory set; returns the keys of ``trajectories_from_dict``.

    Raises ``ValueError`` naming the file and the key for anything missing or malformed.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--trajectories: no such file: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        # torch's own message runs to several lines about weights_only; one line says what matters
        raise ValueError(f"--trajectories: {path} is not a trajectory set: torch.load(weights_only=True) cannot read "
                         f"it ({type(exc).__name__}); give a dict of tensors saved by torch.save, as "
                         f"--save_trajectories writes (the format is in --help)") from None
    if not isinstance(data, dict):
        raise ValueError(f"--trajectories: {path} holds a {type(data).__name__}, expected a dict (see --help)")
    return trajectories_from_dict(data, source=str(path))


def trajectories_from_dict(data: dict, source: str = "trajectories") -> dict:
    """The checked analysis inputs: ``delta_s [N, T]``, ``delta_r`` (``{definition: [N, T, K]}``),
    ``reward_names`` and ``sigmas`` (``[T+1]`` or ``None``)."""
    import torch

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
    delta_r = {}
    if "delta_r" in data:
        delta_r["given"] = _with_objectives(tensor("delta_r").double(), n, t, source, "delta_r", "[N, T]")
    elif "rewards" in data:
        for key, definition in DEFINITIONS.items():
            if key not in data:
                continue
            rewards = tensor(key).double()
            if rewards.dim() not in (2, 3) or rewards.shape[:2] != (n, t + 1):
                raise ValueError(f"{source}: {key!r} must be [N, T+1] or [N, T+1, K] = [{n}, {t + 1}(, K)], "
                                 f"got {tuple(rewards.shape)}")
            delta_r[definition] = _with_objectives(rewards[:, 1:] - rewards[:, :-1], n, t, source, key, "[N, T+1]")
    else:
        raise ValueError(f"{source}: needs 'rewards' [N, T+1(, K)] or 'delta_r' [N, T(, K)]; found keys {sorted(data)}")
    k = next(iter(delta_r.values())).shape[2]
    if any(d.shape[2] != k for d in delta_r.values()):
        raise ValueError(f"{source}: 'rewards' and 'rewards_latent' have different numbers of rewards")
    names = data.get("reward_names") or [f"reward_{i}" for i in range(k)]
    if len(names) != k:
        raise ValueError(f"{source}: {len(names)} reward_names for K = {k} rewards")
    sigmas = data.get("sigmas")
    if sigmas is not None:
        sigmas = tensor("sigmas").double().flatten()
        if sigmas.shape[0] != t + 1:
            raise ValueError(f"{source}: 'sigmas' must hold T+1 = {t + 1} values, got {sigmas.shape[0]}")
    return {"delta_s": delta_s, "delta_r": delta_r, "reward_names": [str(x) for x in names], "sigmas": sigmas}


def _with_objectives(delta_r: torch.Tensor, n: int, t: int, source: str, key: str, expected: str) -> torch.Tensor:
    if delta_r.dim() == 2:
        delta_r = delta_r.unsqueeze(-1)
    if delta_r.dim() != 3 or delta_r.shape[:2] != (n, t):
        raise ValueError(f"{source}: {key!r} does not match the {n} trajectories of {t} steps (expected {expected}(, K)), "
                         f"got dR of shape {tuple(delta_r.shape)}")
    return delta_r


def demo_trajectories(config: DemoConfig, n: int, seed: int, log=print) -> dict:
    """Sample ``n`` SDE trajectories of the demo's base model and score, at every state t = 0..T, both
    definitions of the state: ``rewards`` (the predicted clean sample made at ``z_t``) and
    ``rewards_latent`` (``z_t`` itself). The last state of both is the image the trainer scores: the
    last step's predicted clean sample (``Rollout.final_clean``), not the noisy last latent."""
    import torch

    from .data import sample_prompts
    from .experiment import configure_torch
    from .model import unpack
    from .pixel_rewards import objective_rewards
    from .pretrain import load_or_train_base_model
    from .sampling import sample_trajectories, sigma_schedule

    configure_torch(config)
    model, _ = load_or_train_base_model(config, log=log)
    generator = torch.Generator().manual_seed(seed)
    prompts = sample_prompts(n, generator)
    noise = torch.randn((n,) + model.token_shape, generator=generator)
    rollout = sample_trajectories(model, prompts, noise, sigma_schedule(config.sampling_steps, config.shift),
                                  config.eta, generator)
    final = rollout.final_clean.unsqueeze(1)  # [N, 1, tokens, C]
    states = {"rewards": torch.cat([rollout.clean[:, :-1], final], 1),
              "rewards_latent": torch.cat([rollout.latents[:, :-1], final], 1)}
    count = rollout.latents.shape[1]

    @torch.no_grad()
    def score(tokens):
        images = unpack(tokens.flatten(0, 1), config.image_size)
        return objective_rewards(images, prompts.repeat_interleave(count, 0), config.objectives).view(n, count, -1)

    return {"latents": rollout.latents, "reward_names": list(config.objectives), "prompt_ids": prompts,
            "sigmas": rollout.sigmas} | {key: score(value) for key, value in states.items()}


def analyse(trajectories: dict) -> dict:
    """``{"rows": proxy_rows(...), "residual_pearson": float, "residual_pearson_by_definition": {...}}``
    on the summed rewards."""
    from .proxy import proxy_rows, residual_pearson

    delta_s = trajectories["delta_s"]
    summed = {definition: d.sum(dim=-1) for definition, d in trajectories["delta_r"].items()}
    residual = {definition: residual_pearson(delta_s, d) for definition, d in summed.items()}
    return {"rows": proxy_rows(delta_s, summed, trajectories["sigmas"]),
            "residual_pearson": next(iter(residual.values())), "residual_pearson_by_definition": residual}


def main(argv=None) -> int:
    parser, argv, args, code = parse(build_parser, argv)
    if args is None:
        return code
    from .proxy import PAPER_TABLE5, format_rows

    try:
        if args.num_trajectories < 1:
            raise ValueError(f"--num_trajectories: must be >= 1, got {args.num_trajectories}")
        config = from_namespace(DemoConfig, args)
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
            raw = demo_trajectories(config, args.num_trajectories, args.seed, log=log)
            saved_to = Path(args.save_trajectories or out / "trajectories.pt")
            atomic_torch_save(raw, saved_to)
            trajectories = trajectories_from_dict(raw, source="demo")
            source = (f"the demo's base model: {args.num_trajectories} SDE trajectories, {config.sampling_steps} steps, "
                      f"eta {config.eta}, shift {config.shift}, seed {args.seed} (saved to `{saved_to}`)")
        analysis = analyse(trajectories)
    except (ValueError, OSError) as exc:
        return fail(parser.prog, str(exc), code=1)
    table = format_rows(analysis["rows"])
    n, t = trajectories["delta_s"].shape
    residual = ", ".join(f"{d} {v:+.3f}" for d, v in analysis["residual_pearson_by_definition"].items())
    command = " ".join(["otca-patch proxy"] + [shlex.quote(a) for a in argv])
    report = "\n".join([
        "# Proxy validity of TCD's progress (docs/credit.md 7, the paper's Table 5), with controls", "",
        f"Command: `{command}`. Source: {source}; {n} trajectories x {t} steps; dR of the summed rewards "
        f"({', '.join(trajectories['reward_names'])}).", "",
        "dS[t] = cos(z_t, z_T) - cos(z_{t-1}, z_T) against dR[t] = R(state_t) - R(state_{t-1}), per trajectory then "
        "averaged (higher is better except argmax_distance, in steps). `prediction`: the state is the predicted clean "
        "sample; `latent`: the latent itself; both end at the image the trainer scores. Controls: `mean_dS_profile` "
        "(the same per-step mean dS for every trajectory) and `sigma_decrement` (sigma_{t-1} - sigma_t): a proxy "
        "informs about individual trajectories only where it beats them.", "",
        table, "",
        f"Residual Pearson (dS against dR after removing each step's mean over trajectories): {residual}.", "",
        "The paper's line is FLUX.1 with a learned preference reward; the lines measured here are whatever model and "
        "rewards produced the trajectories (for the default, a 70k-parameter pixel-space model scored by pixel "
        "statistics), so compare dS with its controls, not the digits with the paper's.", "",
    ])
    atomic_write_json(out / "proxy.json", {"source": source, "paper": PAPER_TABLE5} | analysis)
    atomic_write_text(out / "proxy.md", report)
    print(table)
    print(f"\nresidual Pearson: {residual}")
    print(f"{n} trajectories x {t} steps; wrote {out / 'proxy.md'} and {out / 'proxy.json'}")
    return 0
