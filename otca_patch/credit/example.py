"""``otca-patch credit``: the credit engine on a small built-in example, printed as tables.

Two prompts, four samples each, eight denoising steps, three objectives that agree on some samples
and disagree on others: enough to see TCD's step weights, MOCA's mixtures, its cancellations (a
combined advantage of 0 where the objectives disagree) and its exploration bias.
"""
from __future__ import annotations

import argparse

from ..help_text import PlainHelpFormatter
from . import modes
from .config import FUSIONS, MODES, WEIGHT_SCOPES, CreditConfig

OBJECTIVES = ("colour", "brightness", "contrast")


def example_batch(seed: int = 0, steps: int = 8, group_size: int = 4, prompts: int = 2):
    """(rewards [B, 3], latents [B, steps+1, 16, 16], group_ids [B]) with uneven per-step progress."""
    import torch  # here, not above: `otca-patch credit --help` does not pay for torch

    from .groups import group_ids_from_size

    generator = torch.Generator().manual_seed(seed)
    batch = group_size * prompts
    noise = torch.randn(batch, 16, 16, generator=generator)
    sample = torch.randn(batch, 16, 16, generator=generator)
    # each trajectory moves towards its sample at its own uneven pace (some steps matter more)
    pace = torch.rand(batch, steps, generator=generator) ** 3
    progress = torch.cat([torch.zeros(batch, 1), pace.cumsum(1) / pace.sum(1, keepdim=True)], dim=1)
    latents = (1 - progress)[..., None, None] * noise[:, None] + progress[..., None, None] * sample[:, None]
    colour = torch.randn(batch, generator=generator)
    brightness = 0.6 * colour + 0.8 * torch.randn(batch, generator=generator)  # agrees with colour, not always
    contrast = 0.8 * colour + 0.5 * torch.randn(batch, generator=generator)
    rewards = torch.stack([colour, brightness, contrast], dim=1)
    return rewards, latents, group_ids_from_size(batch, group_size)


def _row(values) -> str:
    return " ".join(f"{v:6.2f}" for v in values)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch credit", description=__doc__, formatter_class=PlainHelpFormatter)
    parser.add_argument("--mode", choices=MODES, default="otca",
                        help="credit mode, as --otca_mode of a launch (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the example's rewards and trajectories (default: %(default)s)")
    parser.add_argument("--weight_scope", choices=WEIGHT_SCOPES, default="sample",
                        help="TCD step weights from each sample's own progress ('sample') or the batch's mean "
                             "progress ('batch') (default: %(default)s)")
    parser.add_argument("--explore_center", action="store_true",
                        help="MOCA's exploration strength from each advantage's distance to its group's mean")
    parser.add_argument("--fusion", choices=FUSIONS, default="sample",
                        help="MOCA's mixture per sample ('sample') or one per prompt group ('group') "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    from .engine import compute_credit

    rewards, latents, group_ids = example_batch(args.seed)
    config = CreditConfig(mode=args.mode, weight_scope=args.weight_scope, explore_center=args.explore_center,
                          fusion=args.fusion)
    credit = compute_credit(rewards, latents, group_ids, config)
    print(f"mode {args.mode}: {rewards.shape[0]} samples in groups {group_ids.tolist()}, "
          f"{latents.shape[1] - 1} steps, objectives {', '.join(OBJECTIVES)}\n")
    print("sample  step weights (TCD)" + " " * 38 + "mixture (MOCA)        combined")
    for i in range(rewards.shape[0]):
        print(f"{i:>6}  {_row(credit.step_weights[i])}   {_row(credit.mixture[i])}   {credit.combined[i]:7.3f}")
    summary = credit.summary()
    print(f"\nobjectives in conflict on {summary['conflict_share']:.0%} of samples; "
          f"exploration bias on {summary['explored_share']:.0%}")
    if modes.get(args.mode).fuses:
        print("a combined 0.000: the objectives' advantages disagree in sign on that sample and cancel "
              "(MOCA's minimum-norm rule); their mean is not positive, so no exploration bias keeps a step")
    shown = int(credit.combined.abs().argmax())  # a sample that trains: its advantage is not all zero
    print(f"advantage per step, sample {shown} (the largest |combined|):", _row(credit.advantages[shown]))
    return 0
