"""Tiny, randomly initialised models in the real classes' layouts, built locally without downloads:
what the smoke runs, the launch rehearsal, eval tests and demos load."""
