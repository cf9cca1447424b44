"""``python -m otca_patch.smoke UPSTREAM_DIR OUT_DIR [...]`` (so ``torchrun -m`` and
``accelerate launch -m otca_patch.smoke`` work): the same as ``otca-patch smoke``, and as one
launched process of a world it reports its stacks if it hangs (``hang_report``)."""
import sys

from . import hang_report
from .cli import PROG, main

if __name__ == "__main__":
    try:
        hang_report.arm()
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
