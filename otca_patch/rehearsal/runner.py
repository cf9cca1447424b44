"""The three runs of one target and the checks between them, ending in one line:
``PASS <target> ranks=N dataloader_workers=N steps=N checkpoint=yes script=PATH setup=N vanilla=identical
credit=reference`` or ``FAIL <target> <cause>``.

Run 1 is upstream's command with no wrapper (``bash SCRIPT`` for a plan that runs its script), run 2
the same under ``otca-patch launch`` without ``--otca``, run 3 under ``otca-patch launch --otca
--otca_log_dir RUN/otca`` (``otca-patch launch SCRIPT --otca ...``: the script first, as a user writes it). Each run has its own
folder (``unwrapped``, ``wrapped``, ``otca``) holding its ``stdout.log`` and ``stderr.log``."""
from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .credit_check import check as check_credit
from .credit_check import read_records
from .plan import Plan
from .verbatim import setup_record

RUNS = ("unwrapped", "wrapped", "otca")
#: a line that names an error: the layer's own (it names the cause), else a Python exception
LAYER_ERROR = re.compile(r"otca-patch[a-z ]*: error: .*")  # anywhere: a progress bar's \r may precede it
EXCEPTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Exit|Interrupt)\b")


@dataclass
class Run:
    name: str
    folder: Path
    returncode: int
    seconds: float
    timed_out: bool = False
    stopped_when_finished: bool = False  # a main that never ends: stopped once plan.finished said so

    def error(self) -> str:
        """The layer's first error line, else the last exception of its output (a rank's, not
        torchrun's report of it)."""
        lines = []
        for log in ("stderr.log", "stdout.log"):
            path = self.folder / log
            if path.is_file():
                lines += [re.sub(r"^\[(default)?rank\d+\]:\s*", "", line).strip()
                          for line in path.read_text(errors="replace").splitlines()]
        layer = [found.group(0) for found in map(LAYER_ERROR.search, lines) if found]
        if layer:
            return layer[0][:400]
        found = [line for line in lines if EXCEPTION.match(line) and "ChildFailedError" not in line]
        return found[-1][:300] if found else f"see {self.folder / 'stderr.log'}"


def launcher() -> list[str]:
    """``otca-patch``: this interpreter's console script, else the module run by this interpreter."""
    script = Path(sys.executable).parent / "otca-patch"
    return [str(script)] if script.is_file() else [sys.executable, "-c", "from otca_patch.cli import main; main()"]


def wrapped(name: str, plan: Plan, folder: Path, command: list[str]) -> list[str]:
    """``command`` as run ``name`` starts it: alone, under ``otca-patch launch``, or with ``--otca``."""
    flags = ["--otca", "--otca_log_dir", str(folder / "otca"), *plan.otca_flags] if name == "otca" else []
    if name == "unwrapped":
        return command
    if plan.runs_script:  # the README's form: otca-patch launch SCRIPT [--otca ...]
        return [*launcher(), "launch", plan.script, *flags]
    return [*launcher(), "launch", *flags, "--", *command]


def run_once(plan: Plan, name: str, folder: Path) -> Run:
    """One run of ``plan``'s command (under the wrapper ``name`` asks for), in its own process group,
    stopped with the group at ``plan.timeout_s``."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    cwd = plan.where(folder)
    command = wrapped(name, plan, folder, plan.command(folder))
    (folder / "command.txt").write_text(" ".join(command) + f"\n(in {cwd})\n")
    env = {**os.environ, **plan.env, **(plan.run_env(folder) if plan.run_env is not None else {})}
    started = time.monotonic()
    with open(folder / "stdout.log", "wb") as out, open(folder / "stderr.log", "wb") as err:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        returncode, outcome = wait(process, plan, folder, started)
    return Run(name, folder, returncode, time.monotonic() - started, timed_out=outcome == "timed out",
               stopped_when_finished=outcome == "finished")


def wait(process: subprocess.Popen, plan: Plan, folder: Path, started: float) -> tuple[int, str]:
    """(exit status, how it ended: "exited", "finished" (stopped once ``plan.finished``) or "timed out")."""
    while True:
        try:
            return process.wait(timeout=2.0), "exited"
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() - started > plan.timeout_s:
            stop(process, signal.SIGKILL)
            return process.wait(), "timed out"
        if plan.finished is not None and plan.finished(folder):
            stop(process, signal.SIGTERM)  # torchrun passes it to the ranks
            try:
                return process.wait(timeout=60), "finished"
            except subprocess.TimeoutExpired:
                stop(process, signal.SIGKILL)
                return process.wait(), "finished"


def stop(process: subprocess.Popen, how: int) -> None:
    try:
        os.killpg(process.pid, how)
    except ProcessLookupError:
        pass


def bitwise(values: list[float]) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


def first_difference(a: list[float], b: list[float]) -> str:
    if len(a) != len(b):
        return f"{len(a)} values against {len(b)}"
    at = next(i for i, (x, y) in enumerate(zip(bitwise(a), bitwise(b))) if x != y)
    return f"value {at}: {a[at]!r} against {b[at]!r}"


def failure(plan: Plan, run: Run) -> str | None:
    """The target's FAIL line when ``run`` did not end well, else None."""
    if run.timed_out:
        return f"FAIL {plan.target} the {run.name} run was stopped at its {plan.timeout_s:.0f} s limit"
    if run.returncode != 0 and not run.stopped_when_finished:
        return f"FAIL {plan.target} the {run.name} run exited {run.returncode}: {run.error()}"
    return None


def setup_failure(plan: Plan, runs: dict[str, Run]) -> str | None:
    """The target's FAIL line when a run's script ran a set-up command that failed, or the runs ran
    different numbers of them; else None."""
    for run in runs.values():
        failed = [ran for ran in setup_record(run.folder) if ran.status != 0]
        if failed:
            return f"FAIL {plan.target} the {run.name} run's set-up command `{failed[0].command}` exited {failed[0].status}"
    counts = {run.name: len(setup_record(run.folder)) for run in runs.values()}
    if len(set(counts.values())) > 1:
        return f"FAIL {plan.target} the runs ran different numbers of set-up commands: {counts}"
    return None


def judge(plan: Plan, runs: dict[str, Run]) -> str:
    """The target's line, from its three finished runs and what upstream logged and saved."""
    for run in runs.values():
        if failure(plan, run):
            return failure(plan, run)
    if setup_failure(plan, runs):
        return setup_failure(plan, runs)
    for run in runs.values():
        if not plan.checkpoint_saved(run.folder):
            return f"FAIL {plan.target} the {run.name} run saved no checkpoint"
    otca = runs["otca"].folder / "otca"
    if plan.steps_taken is not None:
        taken = {run.name: plan.steps_taken(run.folder) for run in runs.values()}
    else:  # every run trains the same steps; the --otca run log counts them
        counted = len({r["step"] for r in read_records(otca)})
        taken = {name: counted for name in runs}
    short = {name: steps for name, steps in taken.items() if steps < plan.steps}
    if short:
        return f"FAIL {plan.target} " + ", ".join(f"the {name} run took {steps} optimizer steps"
                                                   for name, steps in short.items()) + f" (at least {plan.steps} asked)"
    unwrapped, wrapped = plan.metrics(runs["unwrapped"].folder), plan.metrics(runs["wrapped"].folder)
    if not unwrapped:
        return f"FAIL {plan.target} the unwrapped run logged no loss or reward"
    if bitwise(unwrapped) != bitwise(wrapped):
        return (f"FAIL {plan.target} vanilla differs: the run under otca-patch launch without --otca logged other "
                f"losses/rewards than upstream's command alone ({first_difference(unwrapped, wrapped)})")
    ranks = sorted({r["rank"] for r in read_records(otca)})
    if ranks != list(range(plan.ranks)):
        return f"FAIL {plan.target} the --otca run log holds ranks {ranks}, expected 0..{plan.ranks - 1}"
    problems = check_credit(otca, plan.ranks, report=lambda _line: None)
    if problems:
        return f"FAIL {plan.target} credit differs from the reference: {problems[0]}"
    return (f"PASS {plan.target} ranks={len(ranks)} dataloader_workers={plan.dataloader_workers} "
            f"steps={min(taken.values())} checkpoint=yes script={plan.script or '-'} "
            f"setup={len(setup_record(runs['otca'].folder))} vanilla=identical credit=reference")


def record_run(path: Path, run: Run) -> None:
    """A line of the target's ``runs.txt``: how each run ended, its wall time and its set-up's."""
    stopped = " (stopped once finished)" if run.stopped_when_finished else ""
    ran = setup_record(run.folder)
    with open(path, "a") as record:
        record.write(f"{run.name}: exit {run.returncode}{stopped}, {run.seconds:.0f} s; {len(ran)} set-up command(s) "
                     f"in {sum(r.seconds for r in ran):.1f} s\n")


def rehearse(plan: Plan, folder: Path) -> str:
    """Run the three runs of ``plan`` under ``folder`` and return the target's line."""
    (folder / "replacements.txt").write_text("".join(f"{line}\n" for line in plan.replacements))
    runs = {}
    for name in RUNS:
        runs[name] = run_once(plan, name, folder / name)
        record_run(folder / "runs.txt", runs[name])
        if failure(plan, runs[name]):  # the later runs would have nothing to be compared with
            return failure(plan, runs[name])
    return judge(plan, runs)
