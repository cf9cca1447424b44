"""The environment variables the launch hands its processes are named in one module, ``env_names``:
no other file of the package or of scripts/ writes one of their names as a string."""
import ast
from pathlib import Path

from otca_patch import env_names

REPO = Path(__file__).resolve().parents[2]
NAMES = {value for name, value in vars(env_names).items() if name.isupper() and isinstance(value, str)}


def written_names(path: Path) -> set:
    return {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
            and node.value in NAMES} | {node.arg for node in ast.walk(ast.parse(path.read_text()))
                                          if isinstance(node, ast.keyword) and node.arg in NAMES}


def test_every_variable_name_is_written_in_env_names_alone():
    files = [*(REPO / "otca_patch").rglob("*.py"), *(REPO / "scripts").glob("*.py")]
    elsewhere = {str(path.relative_to(REPO)): sorted(found) for path in files
                 if path.name != "env_names.py" and (found := written_names(path))}
    assert not elsewhere, elsewhere
    assert {"OTCA_PATCH_ARGS", "OTCA_PATCH_TARGETS", "OTCA_PATCH_RECORD"} <= NAMES


def test_the_start_up_hook_reads_the_names_from_env_names_by_its_path():
    hook = (REPO / "otca_patch" / "launch" / "startup" / "sitecustomize.py").read_text()
    assert "env_names.py" in hook and "import otca_patch" not in hook.split("def ", 1)[0]
