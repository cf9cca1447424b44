#!/usr/bin/env python
"""The bench's headline: the decomposition of every regime's finished ablation in one table.

    .venv/bin/python scripts/bench_decomposition.py runs/bench8  # reads runs/bench8/<regime>/ablation.json

Prints markdown: the cross-regime decomposition table, then each regime's plain lines and the
objectives pushed below the base model.
"""
import json
import sys
from pathlib import Path

from otca_patch.demo.ablate import below_base_lines, regime_condition_line, render_headline
from otca_patch.demo.regimes import REGIMES


def main(argv) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    results = {name: json.loads((folder / name / "ablation.json").read_text())
               for name in REGIMES if (folder / name / "ablation.json").is_file()}
    if not results:
        print(f"bench_decomposition: no <regime>/ablation.json under {folder}", file=sys.stderr)
        return 1
    print(render_headline(results))
    for name, result in results.items():
        print(f"\n**{name}** ({len(result['seeds'])} seeds, {result['config']['grpo_steps']} iterations):\n")
        print("\n".join(f"- {row['plain']}" for row in result["decomposition"]))
        print("\n".join(below_base_lines(result)))
        print(regime_condition_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
