"""``otca-patch COMMAND ...``: one entry point; each command lives in its own module and owns its flags."""
from __future__ import annotations

import importlib
import sys

#: command -> (module with ``main(argv) -> int``, one-line help). Imported lazily so that
#: ``otca-patch doctor`` does not pay for diffusers, and a broken optional part breaks only itself.
COMMANDS = {
    "credit": ("otca_patch.credit.example", "compute OTCA credit on a built-in example and print it"),
    "demo": ("otca_patch.demo.cli", "OTCA vs Multi-GRPO over paired seeds on a tiny FLUX-architecture model (CPU, minutes)"),
    "ablate": ("otca_patch.demo.ablate", "the six credit modes and their controls over several seeds, the paper's Table 4 layout"),
    "timing": ("otca_patch.analysis.timing", "when each objective is decided: objectives x steps map of a demo, ablate or run log"),
    "proxy": ("otca_patch.demo.proxy_command", "proxy validity of TCD's progress (spec section 7, paper Table 5)"),
    "doctor": ("otca_patch.hooks.doctor", "check every hook-point spec against an upstream checkout"),
    "smoke": ("otca_patch.smoke.cli", "run an upstream trainer's real step on the CPU with tiny models, with or without --otca"),
    "launch": ("otca_patch.launch.wrapper", "run an upstream launch script or command line with the layer in every process"),
    "run": ("otca_patch.launch", "run one upstream trainer script with the layer installed, in this process"),
    "ab": ("otca_patch.ab.cli", "A/B run: vanilla (observed) and OTCA sides of one launch, then compare"),
    "rebase": ("otca_patch.tools.rebase", "try upstream commit REF per target (hooks, smoke), in a plain clone or a submodule"),
    "compare": ("otca_patch.analysis.compare_command", "report.md and plots from two or more run folders (A/B, ablations)"),
    "eval": ("otca_patch.evaluation.cli", "generate and score images from upstream checkpoints: the paper's Table 1"),
}


def _usage() -> str:
    lines = ["usage: otca-patch COMMAND [ARGS ...]", "", "commands:"]
    lines += [f"  {name:<8} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "otca-patch COMMAND --help shows a command's own flags."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"otca-patch: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
