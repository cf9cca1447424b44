"""Set-up steps of an upstream launch script, and the watch's criterion for a Python without the hook.

DanceGRPO's scripts run ``pip install -e .`` (an HPSv2-like ``setup.py`` project) before torchrun.
pip's isolated builds and ``python -m venv``'s ensurepip start Python with a PYTHONPATH of their own,
so the start-up hook never runs in them: they never check in. They cannot train (they never load
torch), so the launch lets them run, however much CPU a build step takes. Those launches are rows
of tests/launch/test_fault_matrix.py; here are their projects and wheelhouse (built from the
installed setuptools, no network), and the other side of the criterion: no time limit either way."""
import importlib
import importlib.metadata
import textwrap
import zipfile
from pathlib import Path

import pytest

from test_launch import launch
from test_launch_guard import markers, stand_in  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

#: a build step that burns CPU: far more than the 0.5 s of CPU the watch once allowed before a check-in
BURN = textwrap.dedent('''\
    import time
    started = time.process_time()
    while time.process_time() - started < 2.5:
        pass
''')


def wheel_of_installed(name: str, folder: Path) -> Path:
    """A wheel of the installed distribution ``name``, zipped from its installed files (RECORD)."""
    dist = importlib.metadata.distribution(name)
    path = folder / f"{name}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for file in dist.files:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            wheel.write(file.locate(), str(file))
    return path


def wheel_of_vendored(name: str, owner: str, folder: Path) -> Path:
    """A wheel of the copy of ``name`` that the installed ``owner`` vendors (setuptools vendors
    ``wheel``, which pip 23's default build requirements name)."""
    vendor = Path(importlib.import_module(owner).__file__).parent / "_vendor"
    [info] = vendor.glob(f"{name}-*.dist-info")
    version = info.name[len(name) + 1:-len(".dist-info")]
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for file in sorted((vendor / name).rglob("*")) + sorted(info.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                wheel.write(file, str(file.relative_to(vendor)))
    return path


@pytest.fixture()
def wheels(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel_of_installed("setuptools", folder)
    wheel_of_vendored("wheel", "setuptools", folder)
    wheel_of_installed("packaging", folder)  # what wheel requires
    return folder


def project(upstream: Path, name: str, *, pyproject: bool, burn: bool = False) -> Path:
    """A package like HPSv2 (``setup.py``) or a ``pyproject.toml`` one, in ``upstream/name``."""
    folder = upstream / name
    (folder / name).mkdir(parents=True)
    (folder / name / "__init__.py").write_text("")
    setup = (BURN if burn else "") + f"from setuptools import setup\nsetup(name={name!r}, version='1.0', packages=[{name!r}])\n"
    (folder / "setup.py").write_text(setup)
    if pyproject:
        (folder / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                               'build-backend = "setuptools.build_meta"\n')
    return folder


def test_a_python_without_the_hook_that_loads_torch_is_still_stopped_after_a_long_quiet_start(stand_in):
    """No time limit either way: a Python without the hook that waits, then imports torch, is stopped
    once it has loaded torch, before its first step."""
    upstream, env = stand_in
    line = ("python -I -c 'import time; time.sleep(3); import runpy, sys; sys.argv = [\"t\", \"--out\", \"steps\"]; "
            "runpy.run_path(\"trainer/train.py\", run_name=\"__main__\")'")
    done = launch(upstream, env, line, "--otca")
    assert done.returncode == 2, done.stderr[-4000:]
    assert markers(upstream) == [], "no optimizer step may complete without the layer"
    [stop] = [l for l in done.stderr.splitlines() if "never checked in with the layer" in l]
    assert "has loaded torch" in stop and "started with -I" in stop, stop
