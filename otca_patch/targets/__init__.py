"""One module per upstream script: the runtime that its hook-point spec's inserted code calls."""
