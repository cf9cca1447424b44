"""``python -m otca_patch.rehearsal [--device cpu|cuda] [--out DIR] [--keep] [--jobs N] [TARGET ...]``:
the launch rehearsal of each TARGET (default: every target of every family module), one line each,
then a last line; exit 0 only when every line is PASS."""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import shutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import runner
from .plan import NotRunnable

PROG = "python -m otca_patch.rehearsal"
NOT_FAMILIES = {"__main__", "credit_check", "launch_script", "plan", "runner", "served", "standins", "upstreams",
                "verbatim", "wheelhouse"}


def families() -> dict[str, object]:
    """target -> its family module (every module of this package that has TARGETS)."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]),
                       key=lambda i: i.name):
        if info.name in NOT_FAMILIES or info.ispkg:
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        for target in getattr(module, "TARGETS", ()):
            found[target] = module
    return found


def default_jobs(device: str) -> int:
    """Targets at a time: two where the cores allow (each run is 2 ranks and their DataLoader workers),
    one on a machine of fewer than 4 cores and on a GPU machine (the ranks take its GPUs)."""
    return 1 if device == "cuda" else max(1, min(2, (os.cpu_count() or 1) // 2))


def rehearse_target(target: str, module, out: Path, device: str, keep: bool) -> str:
    folder = out / target
    folder.mkdir(parents=True, exist_ok=True)
    work = folder / "work"
    work.mkdir(exist_ok=True)
    try:
        plan = module.plan(target, work, device)
    except NotRunnable as exc:
        return f"NOT RUN {target} {exc}"
    except Exception as exc:  # the plan could not be made: a line, with the trace in the logs
        (folder / "plan_error.txt").write_text(traceback.format_exc())
        return f"FAIL {target} the rehearsal could not be prepared: {type(exc).__name__}: {str(exc)[:240]}"
    started = time.monotonic()
    line = runner.rehearse(plan, folder)
    (folder / "line.txt").write_text(f"{line}\n({time.monotonic() - started:.0f} s)\n")
    if not keep:  # the logs stay; tiny models, data and working copies go
        shutil.rmtree(work, ignore_errors=True)
        for run in runner.RUNS:
            for entry in (folder / run).glob("*"):
                if entry.is_dir() and entry.name != "otca":
                    shutil.rmtree(entry, ignore_errors=True)
    return line


def main(argv=None) -> int:
    known = families()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"default: all of {', '.join(known)}")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: gloo and the CPU stand-ins (default); cuda: NCCL on this machine's GPUs")
    parser.add_argument("--out", type=Path, help="where each target's logs go (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the tiny models, data and per-run working copies")
    parser.add_argument("--jobs", type=int, help="targets at a time (default: 2 where the cores allow, else 1)")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in known]
    if unknown:
        parser.error(f"not a rehearsal target: {', '.join(unknown)} (they are: {', '.join(known)})")
    targets = args.targets or list(known)
    out = (args.out or Path(tempfile.mkdtemp(prefix="otca-launch-rehearsal-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jobs = args.jobs or default_jobs(args.device)
    started = time.monotonic()
    print(f"launch rehearsal: {len(targets)} target(s) on {args.device}, {jobs} at a time; logs in {out}", flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(rehearse_target, t, known[t], out, args.device, args.keep) for t in targets]
        lines = []
        for target, future in zip(targets, futures):  # in the order asked
            lines.append(future.result())
            print(lines[-1], flush=True)
            replaced = out / target / "replacements.txt"
            if replaced.is_file():  # what was replaced for this machine, under its line
                print("".join(f"    replaced: {line}\n" for line in replaced.read_text().splitlines()), end="")
    failed = [line for line in lines if not line.startswith(("PASS ", "NOT RUN "))]
    seconds = time.monotonic() - started
    verdict = f"passed ({len(lines)} targets)" if not failed else f"failed ({len(failed)} of {len(lines)} targets)"
    print(f"launch rehearsal: {verdict} in {seconds:.0f} s, logs in {out}", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
