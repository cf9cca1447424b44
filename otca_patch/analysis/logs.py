"""Reading one run folder into per-step arrays: the layer's ``run_log.jsonl`` or, where a run has
none, upstream DanceGRPO's ``reward.txt`` (one gathered mean reward per step, written by rank 0).

Everything here raises ``LogError`` naming the file and line that is wrong; problems that lose
nothing worth stopping for become warnings naming file:line instead: a line that is not JSON (a
record cut short by a killed run), non-finite rewards (left out of every mean and of "steps to
reach"), a step some ranks never logged, step weights whose width changes between steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..files import read_jsonl
from ..runlog import LOG_NAME as RUN_LOG
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
    spec: dict = field(default_factory=dict)  # the run log's ``spec``: which trainer file the layer rewrote
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
    """(line number, record) pairs and warnings (``read_jsonl``: a line that is not a JSON object
    is skipped with a warning naming file and line). No records at all is an error."""
    records, warnings = read_jsonl(path)
    if not records:
        raise LogError(f"{path}: no records (empty log: did the run reach its first training step?)"
                       + (f"; {len(warnings)} unreadable line(s): {warnings[0]}" if warnings else ""))
    return records, warnings


#: steps, ranks and world sizes beyond this are no run's (and lose exactness as floats)
_LARGEST_INTEGER = 2 ** 53


class SkippedLine(LogError):
    """A line no run writes (an integer out of any range): skipped with a warning, as unreadable lines are."""


def _integer(path: Path, number: int, record: dict, key: str, default=None) -> int:
    value = record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogError(f"{path}:{number}: {key!r} must be an integer, got {value!r}")
    if abs(value) >= _LARGEST_INTEGER:
        shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}... ({len(str(value))} digits)"
        raise SkippedLine(f"{path}:{number}: {key!r} is {shown}, beyond any run's; skipped it")
    return value


def _matrix(path: Path, number: int, record: dict, key: str, width: int | None = None) -> np.ndarray:
    """``record[key]`` as a float ``[N, width]`` array: rows of equal length, entries numbers or null
    (the run log writes a non-finite float as null; it becomes NaN here)."""
    value = record[key]
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise LogError(f"{path}:{number}: {key!r} must be a list of rows (one per sample), got {type(value).__name__}")
    lengths = sorted({len(row) for row in value})
    if len(lengths) > 1:
        raise LogError(f"{path}:{number}: {key!r} is ragged: its rows have {lengths} entries")
    for row in value:
        for entry in row:
            if entry is not None and (isinstance(entry, bool) or not isinstance(entry, (int, float))):
                raise LogError(f"{path}:{number}: {key!r} holds {entry!r}, which is not a number")
    array = np.array([[np.nan if v is None else float(v) for v in row] for row in value], dtype=float)
    array = array.reshape(len(value), lengths[0] if lengths else 0)
    if width is not None and array.shape[1] != width:
        raise LogError(f"{path}:{number}: {key!r} has {array.shape[1]} columns per sample, expected {width}")
    return array


def _check_record(path: Path, number: int, record: dict, objectives: list | None) -> np.ndarray:
    """Validates one record (naming file:line); returns its rewards ``[B, K]`` (NaN where non-finite)."""
    missing = [key for key in REQUIRED_FIELDS if key not in record]
    if missing:
        raise LogError(f"{path}:{number}: record lacks {', '.join(missing)}")
    _integer(path, number, record, "step")
    _integer(path, number, record, "rank")
    _integer(path, number, record, "world_size", 1)
    names = record["objectives"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise LogError(f"{path}:{number}: 'objectives' must be a non-empty list of names, got {names!r}")
    if objectives is not None and names != objectives:
        raise LogError(f"{path}:{number}: objectives {names} differ from {objectives} earlier in the same log")
    rewards = _matrix(path, number, record, "rewards")
    if rewards.shape[1] != len(names):
        raise LogError(f"{path}:{number}: rewards have shape {list(rewards.shape)}, expected [B, {len(names)}] "
                       f"for objectives {names}")
    return rewards


def _nonfinite_warning(path: Path, number: int, rewards: np.ndarray, names: list) -> str | None:
    bad = ~np.isfinite(rewards)
    if not bad.any():
        return None
    which = ", ".join(f"{name} ({int(count)})" for name, count in zip(names, bad.sum(axis=0)) if count)
    return f"{path}:{number}: {int(bad.sum())} non-finite reward(s) (NaN, inf or null) of {which}; left out of the means"


def _per_sample_columns(path: Path, rows: list[tuple[int, dict]], key: str, width: int | None,
                        warnings: list) -> np.ndarray | None:
    """Mean over samples of ``key`` (``[B, W]`` per record) for one step, or None when some record
    lacks it or it is malformed (then a warning names file:line)."""
    parts = []
    for number, record in rows:
        if key not in record:
            return None
        try:
            parts.append(_matrix(path, number, record, key, width))
        except LogError as exc:
            warnings.append(f"{exc}; the {key} plot leaves this run out")
            return None
    if len({p.shape[1] for p in parts}) > 1:
        return None
    return np.nanmean(np.concatenate(parts), axis=0)


def _from_run_log(path: Path, label: str) -> Run:
    records, warnings = read_records(path)
    objectives = None
    by_step: dict[int, dict[int, tuple[int, dict, np.ndarray]]] = {}
    for number, record in records:
        try:
            rewards = _check_record(path, number, record, objectives)
        except SkippedLine as exc:
            warnings.append(str(exc))
            continue
        objectives = record["objectives"]
        note = _nonfinite_warning(path, number, rewards, objectives)
        if note:
            warnings.append(note)
        ranks = by_step.setdefault(record["step"], {})
        rank = record["rank"]
        if rank in ranks:
            raise LogError(f"{path}:{number}: step {record['step']} rank {rank} was already logged on line "
                           f"{ranks[rank][0]}; two runs appended to one log? give each run its own folder")
        ranks[rank] = (number, record, rewards)

    complete = []
    for step in sorted(by_step):
        world_size = max(r.get("world_size", 1) for _, r, _ in by_step[step].values())
        if len(by_step[step]) < world_size:
            warnings.append(f"{path}: step {step} has {len(by_step[step])} of {world_size} ranks logged; "
                            f"left out (its mean would cover only part of the batch)")
            continue
        rewards = np.concatenate([by_step[step][rank][2] for rank in sorted(by_step[step])])
        if (~np.isfinite(rewards)).all(axis=0).any():
            warnings.append(f"{path}: step {step} has no finite reward for some objective; left out")
            continue
        complete.append(step)
    if not complete:
        raise LogError(f"{path}: no training step with all ranks logged and finite rewards")

    first = records[0][1]
    means, stds, counts, weights, mixtures = [], [], [], [], []
    for step in complete:
        ranked = [by_step[step][rank] for rank in sorted(by_step[step])]
        rewards = np.concatenate([r for _, _, r in ranked])
        means.append(np.nanmean(rewards, axis=0))
        stds.append(np.nanstd(rewards, axis=0))
        counts.append(int(np.isfinite(rewards).all(axis=1).sum()))
        rows = [(number, record) for number, record, _ in ranked]
        weights.append(_per_sample_columns(path, rows, "step_weights", None, warnings))
        mixtures.append(_per_sample_columns(path, rows, "mixture", len(objectives), warnings))
    observe = bool(first.get("observe", False))
    return Run(label=label, path=path, source="run_log", objectives=tuple(objectives), steps=np.array(complete),
               reward_mean=np.array(means), reward_std=np.array(stds), samples=np.array(counts),
               mode="vanilla" if observe else str(first.get("mode", "otca")), observe=observe,
               config=dict(first.get("config") or {}), spec=dict(first.get("spec") or {}),
               step_weights=_stack_columns(path, "step_weights", weights, complete, warnings),
               mixture=_stack_columns(path, "mixture", mixtures, complete, warnings), warnings=warnings)


def _stack_columns(path: Path, key: str, per_step: list, steps: list, warnings: list) -> np.ndarray | None:
    """``[T, W]`` when every step logged ``key`` with the same width W; else None, with a warning
    when the width changed between steps (e.g. a resumed run with another number of sampling steps)."""
    if any(value is None for value in per_step):
        return None
    widths = sorted({len(value) for value in per_step})
    if len(widths) > 1:
        first_of = {w: next(s for s, v in zip(steps, per_step) if len(v) == w) for w in widths}
        warnings.append(f"{path}: {key} has {' and '.join(f'{w} columns from step {first_of[w]}' for w in widths)} "
                        f"(a resumed run with another number of sampling steps?); its plot is left out")
        return None
    return np.array(per_step)


def _from_reward_txt(path: Path, label: str) -> Run:
    """Upstream's reward.txt: line n is step n's gathered mean reward (rank 0 appends one per step).
    A line that is not a number, or is not finite, is skipped with a warning naming file:line."""
    lines = path.read_text(errors="replace").split("\n")
    steps, values, warnings = [], [], []
    step = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        step += 1
        try:
            value = float(line)
        except ValueError:
            warnings.append(f"{path}:{number}: {line.strip()[:40]!r} is not a reward (one float per line); skipped it")
            continue
        if not np.isfinite(value):
            warnings.append(f"{path}:{number}: reward {line.strip()} is not finite; step {step} left out")
            continue
        steps.append(step)
        values.append(value)
    if not values:
        raise LogError(f"{path}: no finite rewards" + (f" ({warnings[0]})" if warnings else " (empty reward.txt)"))
    count = len(values)
    return Run(label=label, path=path, source="reward.txt", objectives=(UPSTREAM_OBJECTIVE,),
               steps=np.array(steps), reward_mean=np.array(values).reshape(count, 1),
               reward_std=np.full((count, 1), np.nan), samples=np.zeros(count, dtype=int), warnings=warnings)
