"""envs/NAME.txt hold what the upstream's own instructions install, nothing added, and the README's
commands for each environment are the ones scripts/check_upstream_env.sh runs.

"Nothing added" is checked against the upstream snapshot itself: every package the pins file installs
is named by upstream's install instructions, at the version they pin where they pin one.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

from upstream_snapshots import missing, unpack_snapshot

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_env_commands", REPO / "scripts" / "readme_env_commands.py")
readme_env_commands = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_env_commands)

ENVIRONMENTS = ("dancegrpo", "flowgrpo", "mixgrpo")
#: environments whose pins are chosen, not upstream's install instructions (envs/NAME.txt says why): VeRL-Omni's
#: CPU environment, less vLLM (tests/verl_omni)
CHOSEN_ENVIRONMENTS = ("verl-omni",)
#: name -> (snapshot, the files of its install instructions)
INSTRUCTIONS = {
    "dancegrpo": ("DanceGRPO-15cc71d.tar.gz", ["env_setup.sh", "pyproject.toml", "requirements-lint.txt",
                                               "scripts/finetune/finetune_flux_grpo.sh"]),
    "flowgrpo": ("flow_grpo-ac4c86e.tar.gz", ["setup.py", "README.md"]),
    "mixgrpo": ("MixGRPO-e5cdd6a.tar.gz", ["env_setup.sh", "pyproject.toml", "requirements-lint.txt"]),
}
#: what upstream installs from git, and its package on PyPI
FROM_GIT = {"hpsv2": "github.com/tgxs002/HPSv2", "openai-clip": "github.com/openai/CLIP"}
#: versions chosen where upstream leaves the name unpinned (the pins file says why)
CHOSEN = {("dancegrpo", "torchvision"): "0.20.0", ("mixgrpo", "torchvision"): "0.20.0",
          ("mixgrpo", "trl"): "0.12.2", ("mixgrpo", "open-clip-torch"): "2.32.0",
          ("mixgrpo", "datasets"): "3.1.0", ("flowgrpo", "torchaudio"): "2.6.0",
          ("dancegrpo", "hpsv2"): "1.2.0"}  # the PyPI release of the HPSv2 checkout upstream installs
#: dependencies of what upstream installs, pinned where today's release breaks the build (the pins file says why)
DEPENDENCIES = {("mixgrpo", "datasets"): "trl"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(name: str) -> list[tuple[str, str]]:
    """(normalised name, pinned version or "") of every requirement line of envs/NAME.txt."""
    found = []
    for line in (REPO / "envs" / f"{name}.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            package, _, version = line.partition("==")
            found.append((normalise(package), version.strip()))
    return found


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_pins_install_nothing_upstreams_instructions_do_not(name):
    archive, files = INSTRUCTIONS[name]
    root = unpack_snapshot(archive)
    if root is None:
        missing(f"no upstream snapshot {archive}")
    text = "\n".join((root / f).read_text() for f in files)
    words = {normalise(w) for w in re.findall(r"[A-Za-z0-9_.\-]+", text)}
    pins = {normalise(m.group(1)) + "==" + m.group(2) for m in re.finditer(r"([A-Za-z0-9_.\-]+)==([\w.]+)", text)}
    problems = []
    for package, version in requirements(name):
        if package in FROM_GIT:
            if FROM_GIT[package] not in text:
                problems.append(f"{package}: upstream does not install {FROM_GIT[package]}")
        elif package not in words and DEPENDENCIES.get((name, package)) not in words:
            problems.append(f"{package}: not in upstream's instructions")
        if version and f"{package}=={version}" not in pins and CHOSEN.get((name, package)) != version:
            problems.append(f"{package}=={version}: upstream pins no such version")
    assert not problems, problems


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_readme_gives_doctor_and_both_smoke_runs_for_every_environment(name):
    rows = readme_env_commands.commands((REPO / "README.md").read_text(), name)
    kinds = [kind for kind, _, _ in rows]
    assert kinds.count("doctor") == 1 and "smoke-vanilla" in kinds and "smoke-otca" in kinds
    outs = [out for _, out, _ in rows if out != "-"]
    assert len(set(outs)) == len(outs)  # each smoke run has its own folder
    assert all(command.split()[0] in ("otca-patch", "torchrun", "accelerate") for _, _, command in rows)


def test_check_script_knows_every_pins_file():
    script = (REPO / "scripts" / "check_upstream_env.sh").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    # dev: this project's own; gpu-*: the GPU machine's stand-in and payload (scripts/gpu_check.sh)
    pinned = sorted(p.stem for p in (REPO / "envs").glob("*.txt") if p.stem != "dev" and not p.stem.startswith("gpu-"))
    assert pinned == sorted(ENVIRONMENTS + CHOSEN_ENVIRONMENTS)
    checked = re.search(r"^upstream_environments=\((.*)\)$", ci, re.M).group(1).split()
    for name in pinned:
        assert re.search(rf"^\s+{name}\)", script, re.M) and name in checked
    # every environment CI checks, overlays included, is built first, two lanes side by side
    built = re.findall(r"check_upstream_env\.sh (\S+) --build", ci)
    assert sorted(built) == sorted(checked) and set(pinned) <= set(checked)


def test_check_script_refuses_an_unknown_option_before_it_builds_anything(tmp_path):
    done = subprocess.run([str(REPO / "scripts" / "check_upstream_env.sh"), "dancegrpo", "--biuld"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OTCA_ENV_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 2
    assert "unknown option '--biuld' (the only one is --build)" in done.stderr
    assert not (tmp_path / "cache").exists()


def test_readme_commands_reject_what_the_check_cannot_verify():
    text = "<!-- check_upstream_env: x -->\n```bash\notca-patch doctor .\npython train.py\n```\n"
    with pytest.raises(ValueError, match="cannot verify: python train.py"):
        readme_env_commands.commands(text, "x")
    with pytest.raises(ValueError, match="no <!-- check_upstream_env: y -->"):
        readme_env_commands.commands(text, "y")
    joined = "<!-- check_upstream_env: x -->\n```bash\n# a comment's quote: it's\ntorchrun \\\n  -m otca_patch.smoke . out --otca\n```"
    assert readme_env_commands.commands(joined, "x") == [("smoke-otca", "out", "torchrun -m otca_patch.smoke . out --otca")]


def test_flowgrpo_setup_pins_are_the_same_at_9745241_so_one_environment_serves_both_commits():
    pinned, newer = unpack_snapshot("flow_grpo-ac4c86e.tar.gz"), unpack_snapshot("flow_grpo-9745241.tar.gz")
    if pinned is None or newer is None:
        missing("no FlowGRPO snapshots")
    requires = [re.search(r"install_requires=\[(.*?)\]", (root / "setup.py").read_text(), re.S).group(1)
                for root in (pinned, newer)]
    assert requires[0] == requires[1]
    assert "diffusers==0.33.1" in requires[1]


#: overlay -> (its base environment, the snapshot whose instructions it follows)
OVERLAYS = {"flowgrpo-diffusers": ("flowgrpo", "flow_grpo-9745241.tar.gz")}


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_an_overlay_is_one_stated_step_over_its_base(name):
    """envs/overlays/NAME.txt: one `# step:` over the base's pins, naming upstream's instruction; each
    package pinned, and either named by that instruction or said in the file's header why it comes."""
    base, archive = OVERLAYS[name]
    path = REPO / "envs" / "overlays" / f"{name}.txt"
    text = path.read_text()
    assert f"# overlay-of: {base}\n" in text and (REPO / "envs" / f"{base}.txt").is_file()
    steps = [line for line in text.splitlines() if line.startswith("# step")]
    assert len(steps) == 1
    root = unpack_snapshot(archive)
    if root is None:
        missing(f"no upstream snapshot {archive}")
    instruction = steps[0].split(": ", 2)[-1]
    assert instruction in (root / "README.md").read_text()  # upstream's own command, verbatim
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    packages = [(normalise(line.partition("==")[0]), line.partition("==")[2])
                for line in text.splitlines() if line.strip() and not line.startswith("#")]
    base_pins = dict(requirements(base))
    for package, version in packages:
        assert version, f"{package} is not pinned"
        assert package in normalise(instruction) or package in normalise(header), package
        assert base_pins.get(package) != version, f"{package}=={version} is already the base's pin"
    script = (REPO / "scripts" / "check_upstream_env.sh").read_text()
    assert re.search(rf"^\s+{name}\)", script, re.M)
