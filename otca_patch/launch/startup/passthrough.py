"""Run a script exactly as ``python script`` would: no rewrite, no runtime (vanilla stays vanilla)."""
from __future__ import annotations

import runpy
import sys


def run_untouched(script: str, argv: list[str]) -> None:
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")
