#!/usr/bin/env python
"""Start-up cost of ``otca-patch launch``'s start-up hook for a process that is not a target.

Runs each case many times, interleaved with its baseline (the same command without the hook on
PYTHONPATH), in this process, and prints the median wall time and CPU time (user + system, of the
child: steadier on a loaded machine) of each and their difference and ratio. The cases, in the environment an ``--otca`` launch sets (flags, targets, trainer shapes of
a checkout, a launch record):

- ``python -c pass``: what every helper process (a shell script's ``python -c``, pip) pays;
- ``python -c 'import torch'``: the step guard's meta-path entry while torch imports;
- ``python other.py``: a script that is not a target, compared with the trainers (the copy check).

    .venv/bin/python scripts/bench_startup.py [--repeats 40] [--checkout upstream/DanceGRPO]

Without ``--checkout`` the trainers compared against are none (``$OTCA_PATCH_SHAPES`` empty).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTUP = REPO / "otca_patch" / "launch" / "startup"


def launch_environment(checkout: Path | None, record: Path) -> dict:
    sys.path.insert(0, str(REPO))
    from otca_patch import env_names
    from otca_patch.hooks.spec import load_specs
    from otca_patch.launch.wrapper import compile_startup_hook, shapes, targets, write_trainer_keys

    specs = load_specs()
    compile_startup_hook()  # as the wrapper does
    write_trainer_keys(specs, checkout, record) if checkout else Path(f"{record}.lines").write_text("")
    env = dict(os.environ, **{env_names.ARGS: "--otca", env_names.TARGETS: targets(specs, []),
                              env_names.SHAPES: shapes(specs, checkout) if checkout else "[]",
                              env_names.RECORD: str(record), env_names.COMMAND: "otca-patch launch"})
    env.pop("PYTHONPATH", None)
    return env


def timed(command: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): CPU time is what the hook adds on a loaded machine."""
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{command} failed ({child.returncode})")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--checkout", type=Path, help="an upstream checkout: its trainers are what scripts are compared with")
    parser.add_argument("--torch", action="store_true", help="also time `import torch` (slow)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        record = folder / "launch.record"
        (folder / "other.py").write_text("import os\nprint(os.getpid())\n")
        hooked = launch_environment(args.checkout.resolve() if args.checkout else None, record)
        hooked["PYTHONPATH"] = str(STARTUP)
        from otca_patch import env_names  # on the path since launch_environment

        baseline = {k: v for k, v in hooked.items() if k not in (*env_names.LAYER, "PYTHONPATH")}
        cases = {"python -c pass": [sys.executable, "-c", "pass"],
                 "python other.py (not a target)": [sys.executable, "other.py"]}
        if args.torch:
            cases["python -c 'import torch'"] = [sys.executable, "-c", "import torch"]
        print(f"{args.repeats} runs each, interleaved; median wall time (hook in an --otca launch's environment "
              f"vs the same command without it); trainers compared: "
              f"{len([s for s in json.loads(hooked[env_names.SHAPES]) if s[2]])}")
        for name, command in cases.items():
            timed(command, hooked, folder), timed(command, baseline, folder)  # warm the caches
            repeats = args.repeats if "torch" not in name else max(5, args.repeats // 8)
            with_hook, without = [], []
            for _ in range(repeats):
                with_hook.append(timed(command, hooked, folder))
                without.append(timed(command, baseline, folder))
            for kind, index in (("wall", 0), ("CPU", 1)):
                a = statistics.median(run[index] for run in with_hook)
                b = statistics.median(run[index] for run in without)
                print(f"  {name:32s} {kind:4s} with hook {a * 1e3:8.2f} ms   baseline {b * 1e3:8.2f} ms   "
                      f"difference {(a - b) * 1e3:+7.2f} ms   ratio {a / b:.3f}")
        checkins = sum(1 for line in record.read_text().splitlines() if line.startswith("checkin\t"))
        print(f"  (the launch record got {checkins} check-ins)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
