"""Offline analysis of finished runs: reading logs, metrics, plots, the comparison report."""
