"""Where the rehearsal finds each upstream checkout: ``$OTCA_UPSTREAM_DANCEGRPO`` /
``$OTCA_UPSTREAM_FLOW_GRPO`` / ``$OTCA_UPSTREAM_MIXGRPO``, else the source snapshot of the pinned
commit, ``<name>-<commit>.tar.gz``, in ``../shared/upstream/`` next to the repository (or
``$OTCA_SHARED/upstream/``), else in the GPU payload's ``.gpu-payload/upstream/``. A snapshot is
unpacked once per machine under the temporary directory, never into the repository."""
from __future__ import annotations

import fcntl
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: name -> (its variable, the pinned commit the specs are verified on, a file every checkout holds)
UPSTREAMS = {
    "DanceGRPO": ("OTCA_UPSTREAM_DANCEGRPO", "15cc71d", "fastvideo/train_grpo_flux.py"),
    "flow_grpo": ("OTCA_UPSTREAM_FLOW_GRPO", "ac4c86e", "scripts/train_sd3.py"),
    "MixGRPO": ("OTCA_UPSTREAM_MIXGRPO", "e5cdd6a", "fastvideo/train_grpo_flux.py"),
}


class UpstreamMissing(RuntimeError):
    """No checkout and no snapshot of an upstream was found (the message says where it looked)."""


def snapshot_places(archive: str) -> list[Path]:
    shared = Path(os.environ["OTCA_SHARED"]) if os.environ.get("OTCA_SHARED") else REPO.parent / "shared"
    return [shared / "upstream" / archive, REPO / ".gpu-payload" / "upstream" / archive]


def checkout(name: str, commit: str | None = None) -> Path:
    """The checkout of upstream ``name`` (at ``commit``, default the pinned one, for snapshots)."""
    variable, pinned, marker = UPSTREAMS[name]
    given = os.environ.get(variable)
    if given:
        if not (Path(given) / marker).is_file():
            raise UpstreamMissing(f"${variable}={given} is not a {name} checkout (it has no {marker})")
        return Path(given).resolve()
    archive = f"{name}-{commit or pinned}.tar.gz"
    places = snapshot_places(archive)
    for place in places:
        if place.is_file():
            return unpack(place)
    raise UpstreamMissing(f"no {name} checkout: set ${variable}, or put {archive} in "
                          f"{' or '.join(str(p.parent) for p in places)}")


def unpack(archive: Path) -> Path:
    """The one folder ``archive`` unpacks to, unpacked once per machine (a lock serialises unpackers)."""
    stem = archive.name.removesuffix(".tar.gz")
    cache = Path(tempfile.gettempdir()) / "otca-upstream-snapshots" / stem
    cache.parent.mkdir(parents=True, exist_ok=True)
    done = cache / ".unpacked"
    with open(cache.parent / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file() or done.read_text() != str(archive.stat().st_size):
            staging = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=cache.parent))
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
            shutil.rmtree(cache, ignore_errors=True)
            staging.rename(cache)
            done.write_text(str(archive.stat().st_size))
    folders = [p for p in cache.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise UpstreamMissing(f"{archive} should unpack to one folder, got {[p.name for p in folders]}")
    return folders[0]
