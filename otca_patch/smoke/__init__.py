"""CPU smoke runs of real upstream trainer steps with tiny models (``otca-patch smoke``,
``python -m otca_patch.smoke``)."""
