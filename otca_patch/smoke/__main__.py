"""``python -m otca_patch.smoke UPSTREAM_DIR OUT_DIR [...]`` (so ``torchrun -m`` and
``accelerate launch -m otca_patch.smoke`` work): the same as ``otca-patch smoke``."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
