"""A side of a comparison: one run, or several runs of the same launch with different seeds.

A RUN argument of ``compare`` that is a folder without a log of its own but with sub-folders that
hold one each (what ``otca-patch ab --seeds N`` writes: ``vanilla/seed0``, ``vanilla/seed1``, ...)
is one side with several runs. Curves and final scores use the side's mean over its runs at the
steps every run logged; the differences (``difference``) use the runs themselves.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .logs import REWARD_TXT, RUN_LOG, LogError, Run, load_run


@dataclass
class Side:
    label: str
    runs: list[Run]
    merged: Run  # the mean over ``runs`` (the run itself for one run)

    @property
    def count(self) -> int:
        return len(self.runs)


def run_folders(path: Path) -> list[Path]:
    """Sub-folders of ``path`` holding a run log, when ``path`` holds none itself; else []."""
    if not path.is_dir() or (path / RUN_LOG).is_file() or (path / REWARD_TXT).is_file():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and ((p / RUN_LOG).is_file() or (p / REWARD_TXT).is_file()))


def load_side(path: Path, label: str) -> Side:
    folders = run_folders(Path(path))
    if not folders:
        run = load_run(path, label)
        return Side(label, [run], run)
    runs = [load_run(folder, f"{label}/{folder.name}") for folder in folders]
    return Side(label, runs, merge(runs, label, Path(path)))


def merge(runs: list[Run], label: str, path: Path) -> Run:
    """The mean of several runs of one side at the steps all of them logged."""
    first = runs[0]
    for run in runs[1:]:
        if run.objectives != first.objectives:
            raise LogError(f"{path}: its runs log different objectives ({first.label}: {list(first.objectives)}, "
                           f"{run.label}: {list(run.objectives)})")
    steps = set(first.steps.tolist())
    for run in runs[1:]:
        steps &= set(run.steps.tolist())
    if not steps:
        raise LogError(f"{path}: its runs share no logged step")
    steps = np.array(sorted(steps))

    def mean_of(attribute):
        values = [getattr(run, attribute) for run in runs]
        if any(v is None for v in values) or len({v.shape[1] for v in values}) > 1:
            return None
        return np.mean([v[[list(run.steps).index(s) for s in steps]] for run, v in zip(runs, values)], axis=0)

    warnings = [w for run in runs for w in run.warnings]
    lengths = {run.label: int(run.steps[-1]) for run in runs}
    if len(set(lengths.values())) > 1:
        warnings.append(f"{path}: its runs end at different steps ({lengths}); the side's curve covers the common steps")
    return Run(label=label, path=path, source=first.source, objectives=first.objectives, steps=steps,
               reward_mean=mean_of("reward_mean"), reward_std=mean_of("reward_std"),
               samples=np.sum([run.samples[[list(run.steps).index(s) for s in steps]] for run in runs], axis=0),
               mode=first.mode, observe=first.observe, config=first.config, spec=first.spec,
               step_weights=mean_of("step_weights"), mixture=mean_of("mixture"), warnings=warnings)
