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
import re
import sys
from dataclasses import field
from datetime import datetime
from typing import Any, Callable


def opt(help: str, *, default: Any, choices: tuple | None = None, parse: Callable[[str], Any] | None = None,
        metavar: str | None = None, group: str | None = None, const: Any = None, flag: str | None = None,
        aliases: tuple[str, ...] = (), value_aliases: dict[str, str] | None = None,
        replaced_by: str | None = None) -> Any:
    """A dataclass field carrying its option: help, choices, a parser for the text, a metavar, a help group.

    const: the value of the option given bare (`--offload` is `--offload cpu`).
    flag: the option's name where it is not the field's (HostSelection.num_gpus is `--gpus`).
    aliases: old names of the option: hidden from --help, they still work and say once what replaced them.
    value_aliases: old names of choices, likewise ({"ssh": "pdsh"}).
    replaced_by: the option itself is an old name, hidden, kept working for old command lines; its note
    names what replaced it.
    """
    meta: dict[str, Any] = {"help": help}
    for key, value in (("choices", choices), ("parse", parse), ("metavar", metavar), ("group", group),
                       ("const", const), ("flag", flag), ("value_aliases", value_aliases),
                       ("replaced_by", replaced_by)):
        if value is not None:
            meta[key] = value
    if aliases:
        meta["aliases"] = tuple(aliases)
    return field(default=default, metadata=meta)


class Renamed(argparse.Action):
    """Stores an option's value; an old name of the option or of a choice is taken and said once on stderr.

    The note goes under the subcommand's name (`bench sweep: --num-gpus is now --gpus`), before anything
    runs, and never to stdout (which --json keeps for its one document).
    """

    def __init__(self, option_strings, dest, *, note: str | None = None,
                 value_aliases: dict[str, str] | None = None, **kw) -> None:
        self.note, self.value_aliases, self.said = note, value_aliases or {}, False
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        note = self.note
        if self.nargs == 0:
            values = self.const
        if isinstance(values, str) and values in self.value_aliases:
            note = f"{option_string} {values} is now {option_string} {self.value_aliases[values]}"
            values = self.value_aliases[values]
        if note and not self.said:
            self.said = True
            print(f"{parser.prog}: {note}", file=sys.stderr)
        setattr(namespace, self.dest, values)


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


def strategies(text: str) -> tuple[str, ...]:
    """--strategies as every command spells them: zero0..zero3, zero2+offload, zero3+nvme, fsdp2, ...; the zero
    suite's older 2 and 2+offload are the same strategies (zero2, zero2+offload)."""
    return tuple(dict.fromkeys(f"zero{s}" if re.fullmatch(r"[0-3](\+\w+)?", s) else s
                               for s in csv_parser(str)(text)))


def moment(text: str) -> float:
    """An option's time as Unix seconds: ISO 8601 (2026-12-02T10:00; local time where it names no zone) or
    Unix seconds (1796205600)."""
    t = text.strip()
    try:
        return float(t) if t.replace(".", "", 1).isdigit() else datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time (ISO 8601, e.g. 2026-12-02T10:00, or Unix "
                                         "seconds)") from None


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(text: str) -> float:
    """A time span as seconds: plain seconds (300, 2.5) or with units (90s, 5m, 1h30m): every timeout's text."""
    t = text.strip().lower()
    try:
        if re.fullmatch(r"\d+(\.\d+)?", t):
            return float(t)
        if not re.fullmatch(r"(\d+(\.\d+)?[smh])+", t):
            raise ValueError
        return sum(float(n) * _UNITS[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)([smh])", t))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time span (seconds, or 90s, 5m, 1h30m)") from None


def option_name(name: str) -> str:
    """The field name as the user types it: micro_batch -> --micro-batch."""
    return "--" + name.replace("_", "-")


def flag_of(cls: type, name: str) -> str:
    """The option of cls's field `name` as the user types it (its `flag`, else the field's name)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.metadata.get("flag") or option_name(name)


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


def add_options(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = (),
                group_of: Callable[[str], str | None] | None = None) -> None:
    """One option per field of cls (but `skip`), grouped by the fields' `group` (else group_of(name), else none),
    with its old names hidden."""
    groups: dict[str, Any] = {g.title: g for g in parser._action_groups if g.title}
    for f in dataclasses.fields(cls):
        if f.name in skip or "help" not in f.metadata:
            continue
        meta = f.metadata
        target = parser
        title = meta.get("group") or (group_of(f.name) if group_of else None)
        if title:
            target = groups.setdefault(title, parser.add_argument_group(title))
        flag = meta.get("flag") or option_name(f.name)
        kw: dict[str, Any] = {"help": help_text(meta["help"], f.default), "dest": f.name, "default": None}
        if "replaced_by" in meta:
            kw.update(help=argparse.SUPPRESS, action=Renamed, note=f"{flag} is now {meta['replaced_by']}")
        if "parse" not in meta and _base_type(f.type) is bool:
            # --x and --no-x, both in --help; None (neither given) keeps the field's default.
            target.add_argument(flag, action=argparse.BooleanOptionalAction, **kw).field_default = f.default
            for old in meta.get("aliases", ()):  # an old name of a flag: given, it is on
                target.add_argument(old, dest=f.name, default=None, help=argparse.SUPPRESS, action=Renamed, nargs=0,
                                    const=True, note=f"{old} is now {flag}")
            continue
        metavar = meta.get("metavar", f.name.upper())
        if "choices" in meta:
            kw["choices"] = tuple(meta["choices"]) + tuple(meta.get("value_aliases", {}))
            if "metavar" not in meta and len(meta["choices"]) <= FEW_CHOICES:
                metavar = "{" + ",".join(map(str, meta["choices"])) + "}"
        if "value_aliases" in meta:
            kw.update(action=Renamed, value_aliases=meta["value_aliases"])
        if "const" in meta:
            kw.update(nargs="?", const=meta["const"])
        kw["type"] = meta.get("parse") or _base_type(f.type)
        # The field's default, which argparse's None stands for: the profile and the help test read it.
        target.add_argument(flag, metavar=metavar, **kw).field_default = f.default
        for old in meta.get("aliases", ()):
            target.add_argument(old, **{**kw, "help": argparse.SUPPRESS, "action": Renamed,
                                        "note": f"{old} is now {flag}"})


def given(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of cls the user gave on the command line (argparse left None for the rest)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if getattr(args, f.name, None) is not None}


def from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """cls built from the options given, over its defaults; overrides win."""
    return cls(**{**given(cls, args), **overrides})
