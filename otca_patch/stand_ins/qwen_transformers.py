"""A transformers with Qwen2.5-VL for the Qwen-Image smoke runs, found without a ``PYTHONPATH``.

Qwen-Image's text encoder is Qwen2.5-VL (transformers 4.49 or later). An environment that keeps an
older transformers for its other trainers (this repository's ``.venv`` keeps DanceGRPO's 4.46.1)
installs a newer one into a folder of its own, which only the Qwen-Image smoke processes import
first: ``$OTCA_QWEN_TRANSFORMERS``, else ``qwen-transformers`` inside the environment
(``.venv/qwen-transformers``, which scripts/setup.sh fills). ``python -m otca_patch.stand_ins.qwen_transformers``
installs it there.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

FOLDER_VARIABLE = "OTCA_QWEN_TRANSFORMERS"
#: what goes into the folder: a release with Qwen2.5-VL and the tokenizers it needs
PACKAGES = ("transformers==4.51.3", "tokenizers>=0.21,<0.22")
_MODEL = "transformers.models.qwen2_5_vl"


def folder() -> Path:
    """Where the newer transformers is looked for (and installed)."""
    return Path(os.environ.get(FOLDER_VARIABLE) or Path(sys.prefix) / "qwen-transformers")


def holds_qwen(path: Path) -> bool:
    return (path / "transformers" / "models" / "qwen2_5_vl").is_dir()


def install_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(path), *PACKAGES]


def environment_has_qwen() -> bool:
    """Whether this environment's transformers has Qwen2.5-VL (found on disk, nothing imported)."""
    spec = importlib.util.find_spec("transformers")
    return spec is not None and any(holds_qwen(Path(p).parent) for p in spec.submodule_search_locations or ())


def use() -> None:
    """Make ``import transformers`` give one with Qwen2.5-VL: this environment's, else the folder's
    (put first on ``sys.path``). Raises ``ValueError`` (one line with the command that installs it)
    when neither has one; call it before anything imports transformers or tokenizers."""
    if environment_has_qwen():
        return
    if not holds_qwen(folder()):
        raise ValueError(f"FlowGRPO's Qwen-Image trainers need transformers with Qwen2.5-VL (4.49 or later); this "
                         f"environment's is older and {folder()} holds none: install one there with "
                         f"`{shlex.join(install_command(folder()))}` (or point ${FOLDER_VARIABLE} at such a folder)")
    early = [name for name in ("transformers", "tokenizers") if name in sys.modules]
    if early:
        raise RuntimeError(f"{' and '.join(early)} imported before the Qwen-Image smoke chose {folder()}")
    sys.path.insert(0, str(folder()))
    importlib.invalidate_caches()


def main() -> int:
    """Install the packages into ``folder()`` unless it holds them already."""
    if not holds_qwen(folder()):
        subprocess.run(install_command(folder()), check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
