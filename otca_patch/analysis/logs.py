"""Reading one run folder into per-step arrays: the layer's ``run_log.jsonl`` or, where a run has
none, upstream DanceGRPO's ``reward.txt`` (one gathered mean reward per step, written by rank 0).

Everything here raises ``LogError`` naming the file (and line) that is wrong; problems that lose
nothing worth stopping for (a last line cut short by a killed run) become warnings instead.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RUN_LOG = "run_log.jsonl"
REWARD_TXT = "reward.txt"
#: what upstream's own reward is called in the run log, so reward.txt runs line up with logged ones
UPSTREAM_OBJECTIVE = "upstream"
REQUIRED_FIELDS = ("step", "rank", "objectives", "rewards")


class LogError(ValueError):
    """A run folder or log that cannot be compared; the message names the file and what is wrong."""


@dataclass
class Run:
    """One run, reduced to what the comparison needs. ``steps`` are the training steps with data;
    row ``i`` of every array belongs to ``steps[i]``."""

    label: str
    path: Path  # the file read
    source: str  # "run_log" or "reward.txt"
    objectives: tuple[str, ...]
    steps: np.ndarray  # [T] ints
    reward_mean: np.ndarray  # [T, K] mean over samples and ranks
    reward_std: np.ndarray  # [T, K] std over samples and ranks (NaN where only a mean was logged)
    samples: np.ndarray  # [T] number of samples behind each mean
    mode: str = "vanilla"  # credit mode the trainer used: "vanilla" for observe and reward.txt runs
    observe: bool = False
    config: dict = field(default_factory=dict)
    step_weights: np.ndarray | None = None  # [T, S] mean over samples and ranks
    mixture: np.ndarray | None = None  # [T, K] mean over samples and ranks
    warnings: list[str] = field(default_factory=list)

    @property
    def trains_with_credit(self) -> bool:
        """Whether OTCA's credit decided this run's updates (observe runs only logged it)."""
        return self.source == "run_log" and not self.observe and self.mode != "vanilla"

    def select(self, objectives: tuple[str, ...]) -> "Run":
        """The same run restricted to ``objectives`` (in that order)."""
        missing = [o for o in objectives if o not in self.objectives]
        if missing:
            raise LogError(f"{self.path}: run {self.label!r} has no objective {', '.join(missing)} "
                           f"(it logged {list(self.objectives)})")
        index = [self.objectives.index(o) for o in objectives]
        mixture = None if self.mixture is None else self.mixture[:, index]
        return Run(**{**self.__dict__, "objectives": tuple(objectives), "reward_mean": self.reward_mean[:, index],
                      "reward_std": self.reward_std[:, index], "mixture": mixture})


def load_run(path: str | Path, label: str | None = None) -> Run:
    """A run folder (its ``run_log.jsonl``, else its ``reward.txt``) or one of those files."""
    path = Path(path)
    if path.is_dir():
        if (path / RUN_LOG).is_file():
            file = path / RUN_LOG
        elif (path / REWARD_TXT).is_file():
            file = path / REWARD_TXT
        else:
            raise LogError(f"{path}: no {RUN_LOG} and no {REWARD_TXT} in this run folder")
    elif path.is_file():
        file = path
    else:
        raise LogError(f"{path}: no such run folder or log file")
    label = label or (path.name if path.is_dir() else path.parent.name)
    if file.name.endswith(".txt"):
        return _from_reward_txt(file, label)
    return _from_run_log(file, label)


def read_records(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """(line number, record) pairs and warnings. A last line that is not JSON is a write cut
    short (the run was killed) and is skipped with a warning; any other bad line is an error."""
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    last = max((n for n, line in enumerate(lines, start=1) if line.strip()), default=0)
    records, warnings = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == last:
                warnings.append(f"{path}:{number}: last line is not complete JSON (a run killed mid-write?); "
                                f"skipped it")
                continue
            raise LogError(f"{path}:{number}: not a JSON record ({exc.msg}, column {exc.colno})") from None
        if not isinstance(record, dict):
            raise LogError(f"{path}:{number}: a record must be a JSON object, got {type(record).__name__}")
        records.append((number, record))
    if not records:
        raise LogError(f"{path}: no records (empty log: did the run reach its first training step?)")
    return records, warnings


def _check_record(path: Path, number: int, record: dict, objectives: list | None) -> None:
    missing = [key for key in REQUIRED_FIELDS if key not in record]
    if missing:
        raise LogError(f"{path}:{number}: record lacks {', '.join(missing)}")
    names = record["objectives"]
    if objectives is not None and names != objectives:
        raise LogError(f"{path}:{number}: objectives {names} differ from {objectives} earlier in the same log")
    rewards = np.asarray(record["rewards"], dtype=float)
    if rewards.ndim != 2 or rewards.shape[1] != len(names):
        raise LogError(f"{path}:{number}: rewards have shape {list(rewards.shape)}, expected [B, {len(names)}] "
                       f"for objectives {names}")


def _from_run_log(path: Path, label: str) -> Run:
    records, warnings = read_records(path)
    objectives = None
    by_step: dict[int, dict[int, tuple[int, dict]]] = {}
    for number, record in records:
        _check_record(path, number, record, objectives)
        objectives = record["objectives"]
        ranks = by_step.setdefault(int(record["step"]), {})
        rank = int(record["rank"])
        if rank in ranks:
            raise LogError(f"{path}:{number}: step {record['step']} rank {rank} was already logged on line "
                           f"{ranks[rank][0]}; two runs appended to one log? give each run its own folder")
        ranks[rank] = (number, record)

    steps = sorted(by_step)
    complete = []
    for step in steps:
        world_size = max(int(r.get("world_size", 1)) for _, r in by_step[step].values())
        if len(by_step[step]) < world_size:
            warnings.append(f"{path}: step {step} has {len(by_step[step])} of {world_size} ranks logged; "
                            f"left out (its mean would cover only part of the batch)")
            continue
        complete.append(step)
    if not complete:
        raise LogError(f"{path}: no training step with all ranks logged")

    first = records[0][1]
    means, stds, counts, weights, mixtures = [], [], [], [], []
    for step in complete:
        rows = [by_step[step][rank][1] for rank in sorted(by_step[step])]
        rewards = np.concatenate([np.asarray(r["rewards"], dtype=float) for r in rows])
        means.append(np.nanmean(rewards, axis=0))
        stds.append(np.nanstd(rewards, axis=0))
        counts.append(len(rewards))
        if all("step_weights" in r for r in rows):
            weights.append(np.concatenate([np.asarray(r["step_weights"], dtype=float) for r in rows]).mean(axis=0))
        if all("mixture" in r for r in rows):
            mixtures.append(np.concatenate([np.asarray(r["mixture"], dtype=float) for r in rows]).mean(axis=0))
    observe = bool(first.get("observe", False))
    return Run(label=label, path=path, source="run_log", objectives=tuple(objectives), steps=np.array(complete),
               reward_mean=np.array(means), reward_std=np.array(stds), samples=np.array(counts),
               mode="vanilla" if observe else str(first.get("mode", "otca")), observe=observe,
               config=dict(first.get("config") or {}),
               step_weights=np.array(weights) if len(weights) == len(complete) else None,
               mixture=np.array(mixtures) if len(mixtures) == len(complete) else None, warnings=warnings)


def _from_reward_txt(path: Path, label: str) -> Run:
    """Upstream's reward.txt: line n is step n's gathered mean reward (rank 0 appends one per step)."""
    lines = path.read_text(errors="replace").split("\n")
    last = max((n for n, line in enumerate(lines, start=1) if line.strip()), default=0)
    values, warnings = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            values.append(float(line))
        except ValueError:
            if number == last:
                warnings.append(f"{path}:{number}: last line {line.strip()!r} is not a number (cut short?); skipped it")
                continue
            raise LogError(f"{path}:{number}: {line.strip()!r} is not a reward (one float per line expected)") from None
    if not values:
        raise LogError(f"{path}: no rewards (empty reward.txt)")
    count = len(values)
    return Run(label=label, path=path, source="reward.txt", objectives=(UPSTREAM_OBJECTIVE,),
               steps=np.arange(1, count + 1), reward_mean=np.array(values).reshape(count, 1),
               reward_std=np.full((count, 1), np.nan), samples=np.zeros(count, dtype=int), warnings=warnings)
