"""Running upstream scripts with the layer installed: as ``__main__`` under any launcher, or as a module."""
from .runner import load_patched_module, run_as_main

__all__ = ["load_patched_module", "run_as_main", "main"]


def main(argv=None) -> int:
    """``otca-patch run SCRIPT [ARGS ...] [--otca ...]``: run one upstream script with the layer."""
    from .worker import main as worker_main

    return worker_main(argv)
