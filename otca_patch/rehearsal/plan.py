"""What a family module tells the runner about one rehearsed target: how upstream's own launch is
started, what it must do (ranks, DataLoader workers, optimizer steps), what was replaced for the
CPU, and how to read back what upstream logged and saved."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


class NotRunnable(Exception):
    """This machine cannot host the target as upstream launches it (too few GPUs): said as a NOT RUN
    line, which is no failure, where the smoke step of the GPU check says NOT RUN for the same reason."""


@dataclass
class Plan:
    """One target's rehearsal. ``command``, ``metrics`` and ``checkpoint_saved`` take the run folder
    (one per run, empty at the start of the run) so that the three runs never share outputs."""

    target: str
    cwd: Path  # where the command runs: the upstream checkout
    command: Callable[[Path], list[str]]  # run folder -> upstream's launch command line, no wrapper
    env: dict[str, str]  # extra environment for all three runs
    ranks: int
    dataloader_workers: int
    steps: int  # optimizer steps every run must take
    replacements: list[str]  # one line per thing replaced for the CPU (or the GPU machine)
    metrics: Callable[[Path], list[float]]  # run folder -> losses and rewards upstream logged, in order
    checkpoint_saved: Callable[[Path], bool]  # run folder -> whether upstream saved a checkpoint
    # flags for the --otca run after `--otca --otca_log_dir RUN/otca`, which the runner adds itself
    otca_flags: list[str] = field(default_factory=list)
    timeout_s: float = 1800.0  # hang guard for one run
    # run folder -> where this run's command runs, made ready by the family module (a per-run copy of
    # the checkout, for an upstream that writes into its working directory); None: ``cwd``
    run_cwd: Callable[[Path], Path] | None = None
    # run folder -> optimizer steps the run took, read from upstream's own output; None: the runner
    # counts the steps of the --otca run's run log (every rank must log each of them)
    steps_taken: Callable[[Path], int] | None = None
    # run folder -> whether the run has done what the rehearsal asks, for a main that never ends on its
    # own (MixGRPO's loops over 1,000,000 epochs): the runner then stops the launch's process group,
    # and that stop is the run's end. None: the run must end by itself
    finished: Callable[[Path], bool] | None = None
    # upstream's launch script the runs come from (relative to the run's folder), named in the PASS line
    script: str = ""
    # the runs start ``script`` itself as a user does (``bash SCRIPT``, ``otca-patch launch SCRIPT``):
    # ``command`` writes the run's copy of it and returns ``["bash", script]``. False: ``command`` is
    # the launch line taken from it
    runs_script: bool = False
    # run folder -> variables of that run only (its PATH with the set-up shims, its own environment)
    run_env: Callable[[Path], dict[str, str]] | None = None

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise ValueError(f"Plan {self.target}: ranks must be at least 1, not {self.ranks}")
        if self.dataloader_workers < 1:
            raise ValueError(
                f"Plan {self.target}: dataloader_workers must be at least 1 (the rehearsal keeps "
                f"upstream's DataLoader workers), not {self.dataloader_workers}"
            )
        if self.steps < 1:
            raise ValueError(f"Plan {self.target}: steps must be at least 1, not {self.steps}")
        if self.runs_script and not self.script:
            raise ValueError(f"Plan {self.target}: runs_script needs the script")
        if any(flag == "--otca" for flag in self.otca_flags):
            raise ValueError(f"Plan {self.target}: otca_flags must not repeat --otca (the runner adds it)")

    def where(self, run: Path) -> Path:
        """The folder this run's command runs in."""
        return self.run_cwd(run) if self.run_cwd is not None else self.cwd
