"""``otca-patch eval``: images from upstream checkpoints, scored on the paper's metrics (Table 1)."""
