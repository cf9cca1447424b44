"""``pass_sets.py WITHOUT.log WITH.log``: VeRL-Omni's tests run without and with the plug-in (pytest -rA
logs). Prints both counts and the tests that fail without it; fails when a test that passes without the
plug-in does not pass with it, or when either run passed nothing."""
from __future__ import annotations

import re
import sys

OUTCOMES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")


def outcomes(path: str) -> dict:
    """test id -> outcome, from pytest's ``-rA`` short summary."""
    found = {}
    for line in open(path, errors="replace"):
        match = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line)
        if match:
            found[match.group(2)] = match.group(1)
    return found


def counts(found: dict) -> str:
    return ", ".join(f"{sum(v == o for v in found.values())} {o.lower()}" for o in OUTCOMES
                     if any(v == o for v in found.values()))


def main(without_log: str, with_log: str) -> int:
    without, with_plugin = outcomes(without_log), outcomes(with_log)
    print(f"VeRL-Omni's trainer and reward-loop CPU tests without the plug-in: {counts(without) or 'none ran'}")
    print(f"with the plug-in loaded: {counts(with_plugin) or 'none ran'}")
    for test, outcome in sorted(without.items()):
        if outcome in ("FAILED", "ERROR"):
            print(f"  fails without the plug-in: {test}")
    lost = sorted(t for t, o in without.items() if o == "PASSED" and with_plugin.get(t) != "PASSED")
    for test in lost:
        print(f"  passes without the plug-in, not with it: {test} ({with_plugin.get(test, 'not run')})")
    passed = [o for o in (without, with_plugin) if "PASSED" in o.values()]
    return 1 if lost or len(passed) < 2 else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
