"""tqdm progress bars that the ``--quiet`` flag (and the tests) switch off."""
from __future__ import annotations

from tqdm.auto import tqdm


def progress_bar(iterable, config, desc: str, **kwargs):
    return tqdm(iterable, desc=desc, disable=bool(getattr(config, "quiet", False)), leave=False, dynamic_ncols=True, **kwargs)
