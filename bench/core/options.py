"""Command-line options generated from typed, frozen dataclasses.

Every option of every subcommand is a field of a config dataclass (RunConfig,
CommConfig, ValidateConfig, ProbeConfig, HostSelection, SuiteOptions): its
name, type, help and choices are written once, on the field, and the parser
is generated from them, so the CLI cannot drift from what the code reads.

    @dataclass(frozen=True, kw_only=True, slots=True)
    class CommConfig:
        iters: int = opt("timed iterations per size", default=20)

    add_options(parser, CommConfig)          # --iters ITERS
    cfg = from_args(CommConfig, args)        # options not given keep the dataclass default

Every generated option defaults to None in argparse, meaning "not given", so
from_args can tell a default from a choice. Booleans get --x and --no-x,
both shown. --help shows each option's default (the field's, unless its help
already says what happens by default) and, for a few choices, the choices.
Validation lives in each dataclass's __post_init__ and raises BadInput
naming the option (option_name).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import field
from typing import Any, Callable


def opt(help: str, *, default: Any, choices: tuple | None = None, parse: Callable[[str], Any] | None = None,
        metavar: str | None = None, group: str | None = None, const: Any = None) -> Any:
    """A dataclass field carrying its option: help, choices, a parser for the text, a metavar, a help group.

    const: the value of the option given bare (`--offload` is `--offload cpu`).
    """
    meta: dict[str, Any] = {"help": help}
    for key, value in (("choices", choices), ("parse", parse), ("metavar", metavar), ("group", group),
                       ("const", const)):
        if value is not None:
            meta[key] = value
    return field(default=default, metadata=meta)


def csv_parser(kind: type, *, dedupe: bool = False) -> Callable[[str], tuple]:
    """An option's text "a,b,c" as a tuple (ints >= 1 for kind int); dedupe: ints sorted and each once,
    strings each once in the order given."""
    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if kind is int:
            bad = [t for t in items if not t.isdigit() or int(t) < 1]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad[0]!r} is not a whole number >= 1")
            ints = [int(t) for t in items]
            return tuple(sorted(set(ints))) if dedupe else tuple(ints)
        return tuple(dict.fromkeys(items)) if dedupe else tuple(items)
    return parse


def option_name(name: str) -> str:
    """The field name as the user types it: micro_batch -> --micro-batch."""
    return "--" + name.replace("_", "-")


def shown(default: Any) -> str:
    """A default as --help shows it: on/off, 300 (not 300.0), a,b for a list, "not set" for None or ""."""
    if default is None or default == "":
        return "not set"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, tuple):
        return ",".join(map(str, default))
    return str(default)


def help_text(help: str, default: Any) -> str:
    """The help with its default said, unless the text already says what happens by default; % escaped."""
    text = help if "default" in help.lower() else f"{help} (default: {shown(default)})"
    return text.replace("%", "%%")


# Choices up to this many are shown in the option's metavar ({fp32,fp16,bf16}); more go by name.
FEW_CHOICES = 8


def _base_type(t: Any) -> type:
    text = t if isinstance(t, str) else getattr(t, "__name__", str(t))
    for name, typ in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if text.startswith(name):
            return typ
    raise TypeError(f"unsupported option type {t!r}: give the field a parse= function")


def add_options(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """One option per field of cls (but `skip`), grouped by the fields' `group`."""
    groups: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or "help" not in f.metadata:
            continue
        meta = f.metadata
        target = parser
        if meta.get("group"):
            target = groups.setdefault(meta["group"], parser.add_argument_group(meta["group"]))
        kw: dict[str, Any] = {"help": help_text(meta["help"], f.default), "dest": f.name, "default": None}
        if "parse" not in meta and _base_type(f.type) is bool:
            # --x and --no-x, both in --help; None (neither given) keeps the field's default.
            target.add_argument(option_name(f.name), action=argparse.BooleanOptionalAction, **kw)
            continue
        metavar = meta.get("metavar", f.name.upper())
        if "choices" in meta:
            kw["choices"] = meta["choices"]
            if "metavar" not in meta and len(meta["choices"]) <= FEW_CHOICES:
                metavar = "{" + ",".join(map(str, meta["choices"])) + "}"
        if "const" in meta:
            kw.update(nargs="?", const=meta["const"])
        kw["type"] = meta.get("parse") or _base_type(f.type)
        target.add_argument(option_name(f.name), metavar=metavar, **kw)


def given(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of cls the user gave on the command line (argparse left None for the rest)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if getattr(args, f.name, None) is not None}


def from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """cls built from the options given, over its defaults; overrides win."""
    return cls(**{**given(cls, args), **overrides})
