"""CPU smoke runs of real upstream trainer steps with tiny models (``scripts/smoke_upstream.py``)."""
