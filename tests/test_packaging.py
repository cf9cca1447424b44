"""The installed package stands on its own: a wheel built from a copy of the sources, installed into a
fresh venv, runs ``otca-patch doctor`` and ``python -m otca_patch.smoke`` on an upstream checkout from a
folder outside the repository, without opening or listing any file of the repository.

The venv sees the running environment's packages (a path entry, not its .pth files, so the running
environment's own otca_patch install is not seen) and gets the wheel with ``--no-deps``: this checks
the package, fast; scripts/check_upstream_env.sh does the full install into the upstream environments.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from upstream_snapshots import upstream_checkout

REPO = Path(__file__).resolve().parents[1]

#: run a command of the installed package with an audit hook that fails on any file of the
#: repository being opened or listed (the upstream checkout given as input is allowed)
AUDITED = """
import os, runpy, sys
repo, allowed, command = sys.argv[1], sys.argv[2].split(os.pathsep), sys.argv[3]
def inside(path, root):
    return path == root or path.startswith(root + os.sep)
def audit(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.realpath(os.fsdecode(args[0]))
        if inside(path, repo) and not any(inside(path, root) for root in allowed):
            sys.stderr.write(f"REPOSITORY FILE REACHED: {event} {path}\\n")
            os._exit(86)
sys.addaudithook(audit)
sys.argv = [command, *sys.argv[4:]]
if command == "otca-patch":
    from otca_patch.cli import main
    sys.exit(main())
runpy.run_module(command, run_name="__main__", alter_sys=True)
"""


def _copy_sources(target: Path) -> Path:
    """What a wheel is built from, copied as git has it (the patches link stays a link)."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "otca_patch", target / "otca_patch", symlinks=True, ignore=ignore)
    shutil.copytree(REPO / "patches", target / "patches", ignore=ignore)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, wheel path) with the wheel built from the sources installed."""
    root = tmp_path_factory.mktemp("packaging")
    sources = _copy_sources(root / "src")
    assert (sources / "otca_patch" / "patches").is_symlink()
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(sources)], check=True, cwd=root, timeout=600,
                   capture_output=True, text=True)
    wheel = next(wheels.glob("otca_patch-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "running_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, cwd=root, timeout=600, capture_output=True, text=True)
    return python, wheel


def _run(python: Path, cwd: Path, command: str, *args: str, allowed: Path, timeout: int = 900):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OTCA_PATCHES_DIR", "OTCA_PATCH_ARGS")}
    env["WANDB_MODE"] = "disabled"
    # the packages of the running environment are allowed too: the dev venv may live in the repository
    allowed_roots = os.pathsep.join([str(allowed.resolve()), os.path.realpath(sys.prefix)])
    return subprocess.run([str(python), "-c", AUDITED, str(REPO.resolve()), allowed_roots, command, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_ships_every_hook_spec_and_the_console_commands(installed):
    _, wheel = installed
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    shipped = {n.removeprefix("otca_patch/patches/") for n in names if n.startswith("otca_patch/patches/")}
    in_repository = {p.relative_to(REPO / "patches").as_posix() for p in (REPO / "patches").rglob("*.toml")}
    assert in_repository and shipped == in_repository
    assert any(Path(name).name.startswith("_") for name in shipped), "the family skeletons the specs extend ship too"
    assert "otca-patch = otca_patch.cli:main" in entry_points
    assert "otca_patch/smoke/__main__.py" in names


def test_installed_package_imports_from_the_venv_with_its_packaged_specs(installed, tmp_path):
    python, _ = installed
    done = _run(python, tmp_path, "otca_patch.hooks.spec", allowed=tmp_path)  # the module itself runs nothing
    assert done.returncode == 0, done.stderr
    probe = subprocess.run([str(python), "-c", "import otca_patch, json; from otca_patch.hooks.spec import "
                            "default_patches_dir, load_specs; print(json.dumps([otca_patch.__file__, "
                            "str(default_patches_dir()), len(load_specs())]))"],
                           cwd=tmp_path, capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert probe.returncode == 0, probe.stderr
    package_file, patches, count = json.loads(probe.stdout)
    venv = python.parent.parent
    assert Path(package_file).is_relative_to(venv) and Path(patches).is_relative_to(venv)
    assert count == len([p for p in (REPO / "patches").rglob("*.toml") if not p.name.startswith("_")])  # skeletons aside


@pytest.fixture(scope="module")
def dancegrpo():
    return upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", "fastvideo/train_grpo_flux.py")


def test_installed_doctor_holds_on_the_upstream_checkout_without_the_repository(installed, dancegrpo, tmp_path):
    python, _ = installed
    done = _run(python, tmp_path, "otca-patch", "doctor", str(dancegrpo), allowed=dancegrpo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "need a new spec" not in done.stdout and "hook points hold" in done.stdout


def test_installed_doctor_says_what_is_wrong_with_a_missing_or_empty_checkout(installed, tmp_path):
    python, _ = installed
    missing = _run(python, tmp_path, "otca-patch", "doctor", str(tmp_path / "nowhere"), allowed=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    empty = tmp_path / "upstream" / "DanceGRPO"
    empty.mkdir(parents=True)
    (empty / ".git").write_text("gitdir: ../../.git/modules/upstream/DanceGRPO\n")  # an uninitialised submodule
    for command in (("otca-patch", "doctor", str(empty)), ("otca_patch.smoke", str(empty), str(tmp_path / "out"))):
        done = _run(python, tmp_path, *command, allowed=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "is empty" in done.stderr and "git submodule update --init upstream/DanceGRPO" in done.stderr
        assert "OTCA_UPSTREAM_DANCEGRPO" in done.stderr and "tar xzf" in done.stderr


@pytest.mark.slow
def test_installed_smoke_runs_the_upstream_step_with_otca_as_a_module(installed, dancegrpo, tmp_path):
    python, _ = installed
    out = tmp_path / "smoke"
    done = _run(python, tmp_path, "otca_patch.smoke", str(dancegrpo), str(out), "--steps", "1",
                "--sampling_steps", "3", "--otca", allowed=dancegrpo)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((out / "smoke.json").read_text())
    assert result["otca"] is True and len(result["steps"]) == 1
    record = json.loads((out / "run_log.jsonl").read_text().splitlines()[0])
    assert record["objectives"] == ["upstream", "clip_t"] and len(record["delta_s"][0]) == 3


def test_the_license_is_the_spdx_expression_setuptools_77_writes(installed):
    """``license = "Apache-2.0"`` (not the deprecated table): the wheel's metadata carries it as an expression."""
    _, wheel = installed
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
