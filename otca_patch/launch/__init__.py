"""Running upstream scripts with the layer installed: as ``__main__`` under any launcher, or as a module.

Kept free of imports: the startup hook imports ``otca_patch.launch.reexec`` in every targeted
process before it re-executes, and must not pay for torch there.
"""

__all__ = ["main"]


def main(argv=None) -> int:
    """``otca-patch run SCRIPT [ARGS ...] [--otca ...]``: run one upstream script with the layer."""
    from .worker import main as worker_main

    return worker_main(argv, command="otca-patch run")
