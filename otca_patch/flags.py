"""Command-line flags generated from a dataclass: one flag per field, one style for every command.

A field ``num_steps: int = 28`` is the flag ``--num_steps`` (underscores, as upstream's own
``--num_generations``). The argparse type comes from the field's real annotation
(``typing.get_type_hints``): ``bool`` is a switch (``--x``; a field that defaults to true also gets
``--no_x``), ``int`` / ``float`` / ``str`` parse as such, ``Literal[...]`` gives the choices,
``tuple[float, ...]`` / ``tuple[str, ...]`` are comma-separated lists, ``Optional[X]`` is ``X``.
Anything else (a ``dict``) names its ``parse`` and ``format`` functions in ``flag(...)``; a flag
that ``parse`` turns into a dict may repeat, and the repeats are merged.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import MISSING, fields
from typing import Any, Callable, Iterable, Literal, Optional, Sequence, Union

from .suggest import did_you_mean


def flag(help: str, default: Any = MISSING, *, default_factory: Any = MISSING, parse: Optional[Callable] = None,
         format: Optional[Callable] = None, choices: Optional[Sequence] = None, **extra) -> Any:
    """A dataclass field that is also a flag; ``parse(str)`` / ``format(value) -> str`` override the
    annotation's parser (for dicts), ``choices`` restricts the values; ``extra`` joins the metadata."""
    metadata = {"help": help, "parse": parse, "format": format, "choices": tuple(choices) if choices else None,
                **extra}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def include(source, *, prefix: str = "", after: str, keep: Callable = lambda f: True) -> Callable:
    """Class decorator, below ``@dataclass``: the fields of dataclass ``source`` that ``keep`` accepts
    become fields ``prefix + name`` of the decorated class, right after its field ``after``, with their
    type, default and metadata (help, choices): one source for a flag that several classes share."""
    def decorate(cls):
        own = dict(cls.__dict__.get("__annotations__", {}))
        if after not in own:
            raise TypeError(f"{cls.__name__}: no field {after!r} to place {source.__name__}'s fields after")
        hints, added = typing.get_type_hints(source), {}
        for f in fields(source):
            if not f.init or not keep(f):
                continue
            added[prefix + f.name] = hints[f.name]
            setattr(cls, prefix + f.name, dataclasses.field(default=f.default, default_factory=f.default_factory,
                                                            metadata=f.metadata))
        names = list(own)
        position = names.index(after) + 1
        cls.__annotations__ = {**{n: own[n] for n in names[:position]}, **added,
                               **{n: own[n] for n in names[position:]}}
        return cls
    return decorate


def included(instance, source, *, prefix: str = "", keep: Callable = lambda f: True) -> dict:
    """The values of ``instance``'s fields that ``include`` took from ``source``, by ``source``'s names."""
    return {f.name: getattr(instance, prefix + f.name) for f in fields(source) if f.init and keep(f)}


# ---------------------------------------------------------------------- value parsers

def comma_list(text: str) -> tuple:
    """``"a, b,,c"`` -> ``("a", "b", "c")``."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _list_of(kind: Callable) -> Callable:
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(part) for part in comma_list(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}") from None
    parse.__name__ = f"{kind.__name__}_list"
    return parse


def _name_value_pairs(text: str, form: str = "NAME=VALUE") -> list:
    """``"a=1,b=/x"`` -> ``[("a", "1"), ("b", "/x")]``; an item that is not ``form`` is an error."""
    pairs = []
    for item in comma_list(text):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"expected {form}, got {item!r}")
        pairs.append((name.strip(), value.strip()))
    return pairs


def name_values(text: str) -> dict:
    """``"a=1,b=/x"`` -> ``{"a": "1", "b": "/x"}`` (e.g. NAME=PATH checkpoints)."""
    return dict(_name_value_pairs(text))


def name_options(text: str) -> dict:
    """``"clip_t.model_name=ViT-B-32,clip_t.quick_gelu=false"`` -> ``{"clip_t": {"model_name": "ViT-B-32",
    "quick_gelu": "false"}}``: values stay text until the reward adapter's parameter types convert
    them (``rewards.registry.convert_options``), so ``model_name=007`` stays ``"007"``."""
    options: dict = {}
    for item in comma_list(text):
        key, sep, value = item.partition("=")
        name, dot, option = key.partition(".")
        if not sep or not dot or not name.strip() or not option.strip():
            raise argparse.ArgumentTypeError(f"expected NAME.KEY=VALUE, got {item!r}")
        options.setdefault(name.strip(), {})[option.strip()] = value.strip()
    return options


def spec_targets(text: str) -> dict:
    """``"dancegrpo-flux=fastvideo/mine.py"`` -> ``{"fastvideo/mine.py": "dancegrpo-flux"}``: keyed by the
    file, so one spec can apply to several copies and a repeated file takes the last spec named."""
    return {path: name for name, path in _name_value_pairs(text, "NAME=PATH (a spec name and a file)")}


def format_spec_targets(value: dict) -> str:
    return ",".join(f"{name}={path}" for path, name in value.items())


def format_name_values(value: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in value.items())


def format_name_options(value: dict) -> str:
    return ",".join(f"{name}.{k}={v}" for name, opts in value.items() for k, v in opts.items())


# ---------------------------------------------------------------------- argparse from the annotations

class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one ``ValueError`` line, with "did you mean" for a near-miss choice,
    instead of argparse's usage block and exit (for flags parsed inside another command)."""

    def error(self, message):
        raise ValueError(message.removeprefix("argument "))

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(str, action.choices))
            raise argparse.ArgumentError(action, f"invalid value {value!r}{did_you_mean(value, action.choices)} "
                                                 f"(choose from {choices})")


class _MergeDicts(argparse.Action):
    """A repeatable flag whose values are dicts: later ones update earlier ones (one level deep)."""

    def __call__(self, parser, namespace, values, option_string=None):
        merged = dict(getattr(namespace, self.dest, None) or {})
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        setattr(namespace, self.dest, merged)


def _strip_optional(kind):
    if typing.get_origin(kind) is Union:
        rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return kind


def _is_bool(kind) -> bool:
    return _strip_optional(kind) is bool


def _parser_for(name: str, kind, metadata) -> dict:
    """argparse options (type, choices) for one field from its resolved annotation."""
    if metadata.get("parse"):
        return {"type": metadata["parse"]}
    kind = _strip_optional(kind)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return {"type": type(args[0]), "choices": args}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in (str, int, float):
        return {"type": comma_list if args[0] is str else _list_of(args[0])}
    if kind in (str, int, float):
        return {"type": kind}
    raise TypeError(f"flag --{name}: no parser for the annotation {kind!r}; give flag(..., parse=...)")


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def add_flags(parser: argparse.ArgumentParser, cls, *, skip: Iterable[str] = (),
              defaults: Optional[dict] = None, fallback_help: Optional[Callable] = None) -> argparse.ArgumentParser:
    """One flag per field of dataclass ``cls``. A flag not given is absent from the namespace (the
    dataclass default applies), unless ``defaults`` gives it a value. ``fallback_help(name)``: the
    help of a field that has none of its own."""
    hints, defaults, skip = _hints(cls), dict(defaults or {}), set(skip)
    for f in fields(cls):
        if f.name in skip or not f.init:
            continue
        meta = f.metadata
        shown = defaults.get(f.name, f.default if f.default is not MISSING else None)
        help_text = meta.get("help") or (fallback_help(f.name) if fallback_help else "")
        if shown not in (None, "", False) and not callable(shown):
            help_text += f" (default: {_format(f, hints[f.name], shown)})"
        default = defaults.get(f.name, argparse.SUPPRESS)
        if _is_bool(hints[f.name]):
            parser.add_argument(f"--{f.name}", action="store_true", default=default, help=help_text)
            if f.default is True:
                parser.add_argument(f"--no_{f.name}", dest=f.name, action="store_false", default=default,
                                    help=f"turn --{f.name} off")
            continue
        options = _parser_for(f.name, hints[f.name], meta)
        if meta.get("choices"):
            options["choices"] = meta["choices"]
        if typing.get_origin(_strip_optional(hints[f.name])) is dict or _strip_optional(hints[f.name]) is dict:
            options["action"] = _MergeDicts
        parser.add_argument(f"--{f.name}", default=default, help=help_text, **options)
    return parser


def from_namespace(cls, namespace: argparse.Namespace, **overrides):
    """An instance of ``cls`` from the fields present in ``namespace`` (and ``overrides``)."""
    values = {f.name: getattr(namespace, f.name) for f in fields(cls) if f.init and hasattr(namespace, f.name)}
    values.update(overrides)
    return cls(**values)


def switches(cls) -> set:
    """The flags of ``cls`` that take no value."""
    hints = _hints(cls)
    names = set()
    for f in fields(cls):
        if _is_bool(hints[f.name]):
            names.add(f"--{f.name}")
            if f.default is True:
                names.add(f"--no_{f.name}")
    return names


def flag_names(cls) -> set:
    return {f"--{f.name}" for f in fields(cls) if f.init} | switches(cls)


def _format(f, kind, value) -> str:
    if f.metadata.get("format"):
        return f.metadata["format"](value)
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def to_argv(instance) -> list:
    """The flags that ``add_flags`` parses back into ``instance`` (only fields that differ from the default)."""
    cls = type(instance)
    hints, default = _hints(cls), cls()
    argv = []
    for f in fields(cls):
        value = getattr(instance, f.name)
        if not f.init or value == getattr(default, f.name):
            continue
        if _is_bool(hints[f.name]):
            argv.append(f"--{f.name}" if value else f"--no_{f.name}")
        else:
            argv += [f"--{f.name}", _format(f, hints[f.name], value)]
    return argv
