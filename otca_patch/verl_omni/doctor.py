"""``otca-patch doctor <VeRL-Omni checkout>``: whether the plug-in's contract holds there."""
from __future__ import annotations

from pathlib import Path

from . import contract


def is_checkout(path: Path) -> bool:
    return (Path(path) / contract.TRAINER).is_file()


def main(checkout: Path) -> int:
    results = contract.check(Path(checkout))
    for item, status in results:
        print(f"  {'ok  ' if status == 'ok' else 'DIFFERS'} {item}" + ("" if status == "ok" else f": {status}"))
    failed = [item for item, status in results if status != "ok"]
    verified = contract.VERIFIED_COMMIT[:7]
    if failed:
        print(f"doctor: failed: {len(results) - len(failed)} of {len(results)} points of the VeRL-Omni plug-in's "
              f"contract hold (verified on {verified}); otca_patch.verl_omni refuses to load here")
        return 1
    print(f"doctor: passed: {len(results)} of {len(results)} points of the VeRL-Omni plug-in's contract hold "
          f"(verified on {verified}); algorithm.adv_estimator=otca can run here")
    return 0
