"""A local wheelhouse for the pip of a rehearsed set-up: wheels of the build tools pip's isolated
builds install (setuptools, and wheel where installed), each built from the distribution installed in
this environment (its files as its RECORD lists them), so that ``pip install --no-index
--find-links WHEELHOUSE`` builds a package with build isolation kept and without network.

Built once per machine under the temporary directory, in a folder named by the content it is built
from (each distribution's name, version and RECORD): a changed environment gets a new folder."""
from __future__ import annotations

import base64
import csv
import fcntl
import hashlib
import importlib.metadata
import io
import shutil
import tempfile
import zipfile
from pathlib import Path

#: the distributions pip's isolated builds of a setup.py project ask for
BUILD_TOOLS = ("setuptools", "wheel")
#: dist-info files of an installation, never of a wheel
INSTALLATION_ONLY = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}


def installed(names=BUILD_TOOLS) -> list[importlib.metadata.Distribution]:
    found = []
    for name in names:
        try:
            found.append(importlib.metadata.distribution(name))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def content_key(distributions: list[importlib.metadata.Distribution]) -> str:
    digest = hashlib.sha256()
    for dist in distributions:
        digest.update(f"{dist.metadata['Name']}=={dist.version}\n".encode())
        digest.update((dist.read_text("RECORD") or "").encode())
    return digest.hexdigest()[:16]


def wheelhouse(names=BUILD_TOOLS) -> Path:
    """The folder of wheels of ``names`` as installed here (built once per content; a lock serialises builders)."""
    distributions = installed(names)
    if not distributions:
        raise FileNotFoundError(f"none of {', '.join(names)} is installed in this environment: the rehearsal's "
                                f"pip builds need it (otca_patch.rehearsal.wheelhouse)")
    root = Path(tempfile.gettempdir()) / "otca-rehearsal-wheelhouse"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / content_key(distributions)
    with open(root / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".built").is_file():
            staging = Path(tempfile.mkdtemp(prefix=f"{folder.name}-", dir=root))
            for dist in distributions:
                build_wheel(dist, staging)
            (staging / ".built").write_text("".join(f"{d.metadata['Name']} {d.version}\n" for d in distributions))
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)
    return folder


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_tags(dist: importlib.metadata.Distribution) -> str:
    """The wheel's tag from its installed WHEEL file (``py3-none-any`` where it names none)."""
    for line in (dist.read_text("WHEEL") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Tag":
            return value.strip()
    return "py3-none-any"


def build_wheel(dist: importlib.metadata.Distribution, folder: Path) -> Path:
    """``dist`` as installed, written as a wheel into ``folder``: its files under site-packages (none
    compiled), its dist-info less what only an installation has, and a new RECORD."""
    name = dist.metadata["Name"].replace("-", "_")
    info = f"{name}-{dist.version}.dist-info"
    entries: dict[str, bytes] = {}
    for file in dist.files or []:
        parts = file.parts
        if ".." in parts or "__pycache__" in parts or file.suffix == ".pyc":
            continue  # console scripts (outside site-packages) and byte code: pip makes them
        if parts[0].endswith(".dist-info") and (len(parts) != 2 or parts[1] in INSTALLATION_ONLY):
            continue
        path = Path(dist.locate_file(file))
        if path.is_file():
            arcname = "/".join(parts) if not parts[0].endswith(".dist-info") else f"{info}/{parts[1]}"
            entries[arcname] = path.read_bytes()
    if f"{info}/WHEEL" not in entries:
        entries[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {wheel_tags(dist)}\n".encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arcname, data in entries.items():
        writer.writerow([arcname, _record_hash(data), len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    target = folder / f"{name}-{dist.version}-{wheel_tags(dist)}.whl"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for arcname, data in entries.items():
            wheel.writestr(arcname, data)
        wheel.writestr(f"{info}/RECORD", record.getvalue())
    return target
