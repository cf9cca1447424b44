"""The README and docs/ as a user reads them: the command blocks that run on the CPU run as written,
every relative link leads to a file, every page is reachable from the README, and the README stays
short enough to read in five minutes.

A ```bash block under ``<!-- ci: run -->`` runs in a temporary folder; one under
``<!-- ci: run in=NAME -->`` (NAME: DanceGRPO, flow_grpo or MixGRPO) runs in that upstream's checkout
(the pinned snapshot, see upstream_snapshots.py; ``in=NAME@COMMIT``: the snapshot of a newer commit),
where its ``cd /path/to/NAME`` line stands for that checkout. Paths under ``/tmp/`` are moved into the test's own temporary folder, so that two runs on
one machine do not meet. Nothing else is changed: ``otca-patch`` is the command of this environment.
The README's ``<!-- check_upstream_env: NAME -->`` blocks are run by scripts/check_upstream_env.sh in
the upstream's own environment (tests/test_upstream_envs.py checks what they hold).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from upstream_snapshots import newer_checkout, upstream_checkout

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"<!-- ci: run(?: in=(?P<upstream>[\w-]+(?:@\w+)?))? -->\n```bash\n(?P<body>.*?)```", re.S)
#: upstream name -> (the variable that points at a checkout, a file every checkout of it has)
UPSTREAMS = {"DanceGRPO": ("OTCA_UPSTREAM_DANCEGRPO", "fastvideo/train_grpo_flux.py"),
             "flow_grpo": ("OTCA_UPSTREAM_FLOW_GRPO", "scripts/train_sd3.py"),
             "MixGRPO": ("OTCA_UPSTREAM_MIXGRPO", "fastvideo/train_grpo_flux.py")}
README_MAX_LINES = 250


def ci_blocks() -> list[tuple[str, str | None, str]]:
    """(``page:line``, upstream or None, the block's text) of every block marked ``ci: run``."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            where = f"{page.relative_to(REPO)}:{text[:match.start()].count(chr(10)) + 1}"
            found.append((where, match.group("upstream"), match.group("body")))
    return found


def runnable(body: str, upstream: str | None, tmp: Path) -> str:
    """The block as bash runs it here: ``cd /path/to/UPSTREAM`` dropped (the test starts in that
    checkout), ``/tmp/`` moved under ``tmp``. Any other placeholder cannot run as written: an error."""
    lines = []
    for line in body.splitlines():
        if upstream and re.fullmatch(rf"cd /path/to/{re.escape(upstream.split('@')[0])}\s*(#.*)?", line.strip()):
            continue
        if "/path/to/" in line:
            raise ValueError(f"a ci: run block cannot run a placeholder path as written: {line.strip()}")
        lines.append(re.sub(r"(?<![\w/])/tmp/", f"{tmp}/", line))
    return "\n".join(lines) + "\n"


BLOCKS = ci_blocks()


@pytest.mark.slow
@pytest.mark.parametrize("where, upstream, body", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_the_block_runs_as_written(where, upstream, body, tmp_path):
    cwd = tmp_path
    if upstream is not None:
        name, _, commit = upstream.partition("@")
        assert name in UPSTREAMS, f"{where}: in={upstream} is none of {sorted(UPSTREAMS)}"
        variable, marker = UPSTREAMS[name]
        cwd = newer_checkout(name, commit, marker) if commit else upstream_checkout(name, variable, marker)
    script = runnable(body, upstream, tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", WANDB_MODE="disabled")
    # the environment the docs name, as a user has it: nothing on PYTHONPATH, no overlay chosen by hand
    for name in ("OTCA_PATCH_ARGS", "OTCA_PATCHES_DIR", "PYTHONPATH", "OTCA_QWEN_TRANSFORMERS"):
        env.pop(name, None)
    # a hang guard of many minutes, not a measure: the A/B smoke runs 12 training steps
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, f"{where} failed ({done.returncode}):\n{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_the_readme_and_docs_mark_their_cpu_blocks():
    marked = {where.split(":")[0] for where, _, _ in BLOCKS}
    assert "README.md" in marked
    commands = " ".join(body for _, _, body in BLOCKS)
    for command in ("otca-patch credit", "otca-patch ab", "otca-patch doctor .",
                    "torchrun --nproc_per_node 2 -m otca_patch.smoke . /tmp/smoke-qwenimage --target flowgrpo-qwenimage --otca"):
        assert command in commands, f"no ci: run block runs {command}"


def test_runnable_keeps_the_commands_and_moves_only_what_it_says():
    body = "cd /path/to/DanceGRPO   # the checkout\notca-patch ab --out /tmp/x --smoke . --steps 6\n"
    assert runnable(body, "DanceGRPO", Path("/work/t")) == "otca-patch ab --out /work/t/x --smoke . --steps 6\n"
    with pytest.raises(ValueError, match="placeholder path"):
        runnable("otca-patch doctor /path/to/flow_grpo\n", "DanceGRPO", Path("/work/t"))
    assert runnable("ls /var/tmp/a\n", None, Path("/work/t")) == "ls /var/tmp/a\n"
    newer = "cd /path/to/flow_grpo\ntorchrun -m otca_patch.smoke . /tmp/q\n"
    assert runnable(newer, "flow_grpo@9745241", Path("/work/t")) == "torchrun -m otca_patch.smoke . /work/t/q\n"


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links in code are not links
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_leads_to_a_file(page):
    broken = []
    for target in _links(page):
        path = target.split("#")[0]
        if not path:
            continue
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: links to nothing: {broken}"


def test_every_page_is_reachable_from_the_readme():
    seen, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t.split("#")[0]).resolve() for t in _links(page) if t.split("#")[0].endswith(".md")]
    unreachable = [str(p.relative_to(REPO)) for p in PAGES if p not in seen]
    assert not unreachable, f"no link path from README.md to {unreachable}"


def test_the_readme_is_read_in_five_minutes():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"
