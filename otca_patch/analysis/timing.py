"""``otca-patch timing PATH``: when each objective is decided (docs/credit.md 9), drawn as a heatmap
(objectives x denoising steps) from a demo folder (``metrics.json``), an ablate folder
(``ablation.json``, one or several regimes) or a run log (``run_log.jsonl``, its records with
``objective_timing``); writes ``timing.png`` and ``timing.json`` and prints, per objective, the step by
which it is mostly decided."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from ..files import atomic_path, atomic_write_json, read_jsonl
from ..help_text import PlainHelpFormatter
from ..runlog import LOG_NAME

DEMO_FILES = ("metrics.json", "ablation.json")


class TimingError(ValueError):
    """A PATH with no map to draw; the message names the file and what is missing."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otca-patch timing", description=__doc__.split("\n\n")[0],
                                     epilog="Step 1 is the first denoising step (the noise side), step T the last.",
                                     formatter_class=PlainHelpFormatter)
    parser.add_argument("path", help="a demo or ablate folder (metrics.json / ablation.json), a run log folder or "
                                     f"its {LOG_NAME}")
    parser.add_argument("--out", default=None, help="folder for timing.png and timing.json (default: PATH's folder)")
    parser.add_argument("--share", type=float, default=0.8,
                        help="'mostly decided' means decided >= this share (default 0.8)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0.0 < args.share <= 1.0:
        print(f"{parser.prog}: --share: must lie in (0, 1], got {args.share}", file=sys.stderr)
        return 2
    try:
        maps, source = load_maps(Path(args.path))
    except (TimingError, OSError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else (source.parent if source.is_file() else source)
    summary = summarise(maps, args.share, source)
    atomic_write_json(out / "timing.json", summary)
    plot_timing(maps, out / "timing.png", args.share)
    for line in summary_lines(summary):
        print(line)
    print(f"wrote {out / 'timing.png'} and {out / 'timing.json'}")
    return 0


# ----------------------------------------------------------------------------- reading

def load_maps(path: Path) -> tuple[list, Path]:
    """``([(label, decided [K, T], objectives, dof), ...], file read)`` from a demo/ablate folder or a run
    log; ``dof``: the map's within-group degrees of freedom, 0 where unknown (a mean over seeds)."""
    if path.is_dir():
        for name in DEMO_FILES + (LOG_NAME,):
            if (path / name).is_file():
                return load_maps(path / name)
        raise TimingError(f"{path}: holds none of {', '.join(DEMO_FILES + (LOG_NAME,))}")
    if not path.is_file():
        raise TimingError(f"{path}: no such file or folder")
    if path.suffix == ".jsonl":
        return _run_log_maps(path), path
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TimingError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    per_regime = data.get("regimes", data) if isinstance(data.get("regimes"), dict) else data
    results = [("", data)] if "runs" in data else [(name, r) for name, r in per_regime.items()
                                                   if isinstance(r, dict) and "runs" in r]
    if not results:
        raise TimingError(f"{path}: neither a demo/ablate result (no 'runs') nor one per regime")
    return [m for regime, result in results for m in result_maps(result, regime, path)], path


def result_maps(result: dict, regime: str = "", source="the result") -> list:
    """``[(label, decided [K, T], objectives, dof), ...]`` of a demo/ablate result: the base model's map (the
    first evaluation, the same for every run) and, per variant, the mean over seeds of its last
    evaluation's map. ``source`` names the result in errors."""
    runs = [r for r in result["runs"] if r.get("history", {}).get("objective_timing")]
    if not runs:
        raise TimingError(f"{source}: no run has history.objective_timing (made before the map was logged? "
                          "rerun the demo or ablate)")
    prefix = f"{regime}: " if regime else ""
    names = list(result["objectives"])
    cfg = result.get("config", {})
    dof = cfg.get("eval_prompts", 0) * (cfg.get("eval_samples_per_prompt", 1) - 1)  # samples minus groups
    maps = [(f"{prefix}base model", _array(runs[0]["history"]["objective_timing"][0]), names, dof)]
    for mode in dict.fromkeys(r["mode"] for r in runs):
        finals = np.stack([_array(r["history"]["objective_timing"][-1]) for r in runs if r["mode"] == mode])
        iterations = runs[0]["history"]["eval_iterations"][-1]
        with np.errstate(all="ignore"):
            maps.append((f"{prefix}{mode} after {iterations} iterations (mean of {len(finals)} seeds)",
                         _nanmean(finals), names, 0))
    return maps


def _run_log_maps(path: Path) -> list:
    records, _ = read_jsonl(path)
    timed = [(n, r) for n, r in records if r.get("objective_timing") is not None]
    if not timed:
        raise TimingError(f"{path}: no record has objective_timing (a target logs it where its probe runs)")
    line, last = timed[-1]
    objectives = list(last.get("objectives") or [])
    value = _array(last["objective_timing"])
    if len(objectives) != value.shape[0]:
        raise TimingError(f"{path}:{line}: objective_timing has {value.shape[0]} rows for objectives {objectives}")
    return [(f"run log, step {last.get('step', '?')}", value, objectives, int(last.get("objective_timing_dof", 0)))]


def _array(rows) -> np.ndarray:
    return np.array([[math.nan if v is None else float(v) for v in row] for row in rows], dtype=float)


def _nanmean(stack: np.ndarray) -> np.ndarray:
    defined = ~np.isnan(stack)
    total = np.where(defined, stack, 0.0).sum(0)
    count = defined.sum(0)
    return np.where(count > 0, total / np.maximum(count, 1), math.nan)


# ----------------------------------------------------------------------------- summarising and drawing

def decided_by(row: np.ndarray, share: float) -> int:
    """The first step (1-based) with ``decided >= share``; T when none before; 0 when undefined."""
    if np.isnan(row).all():
        return 0
    reached = np.nonzero(np.nan_to_num(row, nan=-1.0) >= share)[0]
    return int(reached[0]) + 1 if reached.size else row.shape[0]


def summarise(maps: list, share: float, source: Path) -> dict:
    """Every map with its decided-by steps and, where its within-group degrees of freedom are known
    (one evaluation, not a mean over seeds), the 95% Fisher interval of each value (credit.md 9.1)."""
    items = []
    for label, value, names, dof in maps:
        item = {"label": label, "objectives": names, "steps": int(value.shape[1]), "decided": _listed(value),
                "decided_by": {k: decided_by(value[i], share) for i, k in enumerate(names)}}
        if dof >= 3:
            import torch

            from ..credit.timing import correlation_interval

            low, high = correlation_interval(torch.from_numpy(np.sqrt(value)), dof)
            item.update(dof=dof, interval_95={"low": _listed(low.numpy()), "high": _listed(high.numpy())})
        items.append(item)
    return {"source": str(source), "share": share,
            "convention": "step 1 = the first denoising step (noise side), step T = the last", "maps": items}


def _listed(value: np.ndarray) -> list:
    return [[None if math.isnan(v) else v for v in row] for row in value.tolist()]


def summary_lines(summary: dict) -> list:
    """Per objective, the step by which it is mostly decided: every line of each reference map (a
    regime's base model, or the run log's), and of a trained variant's map only the lines that differ
    from its regime's base model."""
    share = round(100 * summary["share"])
    lines, reference = [], {}
    several = len(summary["maps"]) > 1
    for item in summary["maps"]:
        is_reference = item["label"].endswith("base model") or not reference
        changed = {k: s for k, s in item["decided_by"].items() if is_reference or s != reference.get(k)}
        if is_reference:
            reference = item["decided_by"]
            if several:
                lines.append(f"{item['label']}:")
        for name, step in changed.items():
            where = "  " if is_reference and several else (f"  {item['label']}: " if several else "")
            lines.append(f"{where}{name}: not measured (no within-group variation)" if step == 0 else
                         f"{where}{name}: {share}% decided by step {step} of {item['steps']}")
    return lines


def plot_timing(maps: list, path, share: float) -> None:
    """One heatmap per map: objectives (rows) x steps (columns, 1 = noise side), each cell its value,
    the step by which each objective is ``share`` decided outlined."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    n_steps = max(v.shape[1] for _, v, _, _ in maps)
    fig, axes = plt.subplots(len(maps), 1, figsize=(max(5.0, 0.55 * n_steps + 2.5),
                                                    sum(0.45 * len(n) + 1.1 for _, _, n, _ in maps)), squeeze=False)
    for ax, (label, value, names, _) in zip(axes[:, 0], maps):
        image = ax.imshow(np.ma.masked_invalid(value), vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for i in range(value.shape[0]):
            for t in range(value.shape[1]):
                v = value[i, t]
                # an undefined cell is left white, so its dash is black like text on a bright cell
                ax.text(t, i, "–" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if math.isnan(v) or v > 0.6 else "white")
            step = decided_by(value[i], share)
            if step:
                ax.add_patch(plt.Rectangle((step - 1.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.8))
        ax.set_yticks(range(len(names)), names)
        ax.set_xticks(range(value.shape[1]), [str(t + 1) for t in range(value.shape[1])])
        ax.set_title(label, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    axes[-1, 0].set_xlabel(f"denoising step (1 = first, noise side ... {n_steps} = last); "
                           f"red box: first step {round(100 * share)}% decided")
    fig.suptitle("decided[k, t]: share of each objective's final within-group variation fixed by step t's "
                 "predicted clean sample", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
