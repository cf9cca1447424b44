"""tqdm progress bars that the ``--quiet`` flag (and the tests) switch off."""
from __future__ import annotations

from tqdm.auto import tqdm


def progress_bar(iterable, config, desc: str, **kwargs):
    return tqdm(iterable, desc=desc, disable=bool(getattr(config, "quiet", False)), leave=False, dynamic_ncols=True, **kwargs)


class TickBar:
    """A progress bar over ``total`` ticks whose clock starts at the first tick.

    The first tick of a GRPO run comes after process start-up, the model's loading and the base
    model's evaluation; a bar started before them would read that one-off wait as the time of every
    iteration (a first ETA of hours). This one appears at the first tick and estimates from the average
    rate of the ticks after it (``smoothing=0``), so its ETA is right from the second tick on.
    """

    def __init__(self, total: int, config, desc: str):
        self.total, self.config, self.desc, self.bar = total, config, desc, None

    def update(self, n: int = 1) -> None:
        if self.bar is None:
            self.bar = tqdm(total=self.total, initial=n, desc=self.desc, smoothing=0, leave=False, dynamic_ncols=True,
                            disable=bool(getattr(self.config, "quiet", False)))
        else:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
