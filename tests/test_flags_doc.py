"""docs/flags.md's table of flags is the config dataclass's: every field of ``OtcaConfig`` has a row,
every row is a field, and each row's default is the field's."""
import math
import re
from dataclasses import MISSING, fields
from pathlib import Path

from otca_patch.config import OtcaConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "flags.md"


def documented_defaults() -> dict:
    """``{field name: default cell}`` of the table under '## Flags' (a row naming several flags gives
    their defaults in the same order, comma-separated)."""
    section = DOC.read_text().split("\n## Flags\n", 1)[1]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `--"):
            continue
        flag_cell, default_cell = [cell.strip() for cell in line.split("|")[1:3]]
        names = re.findall(r"`--(\w+)[^`]*`", flag_cell)
        defaults = [cell.strip() for cell in default_cell.split(",")] if len(names) > 1 else [default_cell]
        assert len(defaults) == len(names), f"docs/flags.md: {flag_cell} has {len(names)} flags, defaults {default_cell!r}"
        rows.update(zip(names, defaults))
    return rows


def default_of(field):
    return field.default if field.default is not MISSING else field.default_factory()


def number(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def test_every_field_has_a_row_and_every_row_is_a_field():
    documented, names = documented_defaults(), [f.name for f in fields(OtcaConfig)]
    assert sorted(set(names) - set(documented)) == [], "fields without a row in docs/flags.md"
    assert sorted(set(documented) - set(names)) == [], "rows of docs/flags.md that are no field of OtcaConfig"


def test_each_rows_default_is_the_fields():
    documented = documented_defaults()
    for field in fields(OtcaConfig):
        cell, default = documented[field.name], default_of(field)
        where = f"docs/flags.md, --{field.name}: default {cell!r}, the field's is {default!r}"
        if isinstance(default, bool):
            assert cell.split()[0] == ("on" if default else "off"), where
        elif isinstance(default, (int, float)):
            assert number(cell) is not None and math.isclose(number(cell), default, rel_tol=1e-12), where
        elif isinstance(default, str) and default:
            assert cell == f"`{default}`", where
        elif isinstance(default, tuple) and default:
            assert cell == f"`{','.join(default)}`", where
        else:  # nothing given (None, "", {}): the cell says in words what is used, never a value
            assert number(cell) is None and not cell.startswith("`"), where
