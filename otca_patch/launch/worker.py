"""``python -m otca_patch.launch.worker SCRIPT [ARGS]``: what every launched process becomes when the
layer is active. Flags come from ``$OTCA_PATCH_ARGS`` (set by scripts/otca_run.sh) and from ARGS."""
from __future__ import annotations

import sys

from ..config import config_from_environment
from ..hooks.errors import PatchError
from ..hooks.spec import spec_for_script
from .runner import run_as_main


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print("usage: otca-patch run SCRIPT [ARGS ...] [--otca ...]", file=sys.stderr)
        return 2
    script, rest = argv[0], argv[1:]
    try:
        config, upstream_argv = config_from_environment(rest)
        spec = spec_for_script(script)
        if spec is None:
            raise ValueError(f"{script} is not an upstream file that otca-patch has hook points for "
                             f"(see patches/ and `otca-patch doctor`)")
        if not config.active:
            # no --otca: the upstream file runs untouched (no rewrite, no runtime)
            from .startup.passthrough import run_untouched

            run_untouched(script, upstream_argv)
            return 0
        run_as_main(script, upstream_argv, spec, config)
    except (PatchError, ValueError) as exc:
        print(f"otca-patch: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
