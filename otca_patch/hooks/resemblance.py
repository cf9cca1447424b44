"""Whether a script is a copy of a targeted trainer: the one rule ``doctor`` and the launch's start-up
hook both apply.

A script is a copy of a trainer when it holds at least ``COPY_SHARE`` of the trainer's distinct
lines (stripped, comments and blank lines aside). Function names do not count: derivatives rename
them (BranchGRPO's FLUX trainer renames ``train_one_step``).

Lines are compared by their CRC-32 (``line_keys``): the launch's wrapper writes each trainer's keys
once, so a process that is not a target reads one short file instead of every trainer.

Standard library only and no package imports: the start-up hook loads this file by its path, in
processes whose Python may not be able to import otca_patch.
"""

#: a copy shares at least this part of its trainer's distinct lines
COPY_SHARE = 0.5


def distinct_lines(text):
    """The set of stripped lines of ``text``, blank lines and comments aside."""
    return {line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")}


def line_keys(text):
    """``distinct_lines`` as CRC-32 hex strings: what copies are compared by."""
    from zlib import crc32

    return {"%08x" % crc32(line.encode("utf-8", "surrogateescape")) for line in distinct_lines(text)}


def read_text(path):
    """The text of ``path``, or None when it cannot be read."""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def nearest(script_keys, trainers):
    """``(key, share)`` of the trainer sharing the largest part of its distinct lines with the script
    (``script_keys``: its ``line_keys``), or None when no trainer shares any. ``trainers``: ``(key,
    trainer line_keys)`` pairs (None or empty: skipped). A share of at least ``COPY_SHARE`` makes the
    script a copy."""
    best = None
    for key, theirs in trainers:
        if not theirs:
            continue
        share = len(theirs & script_keys) / len(theirs)
        if share > 0 and (best is None or share > best[1]):
            best = (key, share)
    return best


def is_copy(found):
    """Whether ``nearest``'s answer makes the script a copy."""
    return found is not None and found[1] >= COPY_SHARE
