#!/usr/bin/env python
"""Alias of ``otca-patch smoke`` (``python -m otca_patch.smoke``); see ``--help``."""
import sys

from otca_patch.smoke.cli import main

if __name__ == "__main__":
    sys.exit(main())
