"""The one dataclass-to-argparse generator: flag names, types from the real annotations, round trips."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal, Optional

import pytest

from otca_patch import flags
from otca_patch.flags import flag


@dataclass
class Example:
    num_steps: int = flag("steps", 28)
    lr: float = flag("learning rate", 1e-3)
    name: str = flag("a name", "x")
    mode: Literal["a", "b"] = flag("a mode", "a")
    weights: Optional[tuple[float, ...]] = flag("weights", None)
    words: tuple[str, ...] = flag("words", ("w",))
    quiet: bool = flag("no output", False)
    same_noise: bool = flag("shared noise", True)
    ckpt: dict = flag("NAME=PATH", default_factory=dict, parse=flags.name_values, format=flags.format_name_values)


def parse(argv):
    parser = flags.add_flags(argparse.ArgumentParser(), Example)
    return flags.from_namespace(Example, parser.parse_args(argv))


def test_types_come_from_the_annotations_not_their_strings():
    got = parse(["--num_steps", "3", "--lr", "0.5", "--mode", "b", "--weights", "1,0.5", "--words", "p, q"])
    assert got.num_steps == 3 and isinstance(got.num_steps, int)
    assert got.lr == 0.5 and got.mode == "b" and got.weights == (1.0, 0.5) and got.words == ("p", "q")


def test_flags_not_given_keep_the_dataclass_defaults():
    assert parse([]) == Example()


def test_one_style_underscores_and_switches():
    assert flags.flag_names(Example) >= {"--num_steps", "--same_noise", "--no_same_noise", "--quiet"}
    assert "--no_quiet" not in flags.flag_names(Example)
    assert flags.switches(Example) == {"--quiet", "--same_noise", "--no_same_noise"}
    assert parse(["--quiet", "--no_same_noise"]) == Example(quiet=True, same_noise=False)
    with pytest.raises(SystemExit):
        parse(["--num-steps", "3"])


def test_bad_values_are_refused():
    for argv in (["--num_steps", "2.5"], ["--mode", "c"], ["--weights", "1,x"], ["--ckpt", "novalue"]):
        with pytest.raises(SystemExit):
            parse(argv)


def test_repeated_dict_flags_merge():
    assert parse(["--ckpt", "a=/1,b=/2", "--ckpt", "b=/3"]).ckpt == {"a": "/1", "b": "/3"}


def test_round_trip_through_argv():
    value = Example(num_steps=5, lr=0.25, mode="b", weights=(1.0, 2.0), words=("u", "v"), quiet=True,
                    same_noise=False, ckpt={"a": "/x"})
    assert parse(flags.to_argv(value)) == value
    assert flags.to_argv(Example()) == []


def test_an_annotation_without_a_parser_is_an_error_naming_the_flag():
    @dataclass
    class Bad:
        table: dict = flag("no parser", default_factory=dict)

    with pytest.raises(TypeError, match="--table"):
        flags.add_flags(argparse.ArgumentParser(), Bad)


def test_option_values_stay_text_for_the_reward_adapters_to_convert():
    assert flags.name_options("clip_t.model_name=007,clip_t.quick_gelu=false,aesthetic.size=3") == {
        "clip_t": {"model_name": "007", "quick_gelu": "false"}, "aesthetic": {"size": "3"}}


@dataclass
class Options:
    lr: float = flag("learning rate", 1e-3)
    mode: str = flag("a mode", "a", choices=("a", "b"))
    internal: int = flag("not a flag", 3, library_only=True)


@dataclass
@flags.include(Options, prefix="x_", after="first", keep=lambda f: not f.metadata.get("library_only"))
class Including:
    first: bool = flag("a switch", False)
    last: str = flag("a name", "z")


def test_included_fields_are_flags_with_their_sources_type_default_help_and_choices():
    from dataclasses import fields

    assert [f.name for f in fields(Including)] == ["first", "x_lr", "x_mode", "last"]
    parser = flags.add_flags(flags.OneLineParser(), Including)
    got = flags.from_namespace(Including, parser.parse_args(["--x_lr", "0.5", "--x_mode", "b"]))
    assert got.x_lr == 0.5 and got.x_mode == "b" and Including().x_lr == 1e-3
    assert "learning rate" in parser.format_help()
    with pytest.raises(ValueError, match="invalid value 'c'"):
        parser.parse_args(["--x_mode", "c"])
    assert flags.included(got, Options, prefix="x_", keep=lambda f: f.name != "internal") == {"lr": 0.5, "mode": "b"}
