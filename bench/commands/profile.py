"""A site profile: `--config FILE` (or BENCH_CONFIG), a TOML file of what a site has, under every command's options.

    # site.toml
    hostfile = "hostfiles/vector"          # any option of any command, by its name (--container-exec: container-exec
    launcher = "openmpi"                   # or container_exec); a command takes the keys it has, the rest are others'
    container-exec = "apptainer exec --nv /images/bench.sif"
    master-addr = "10.0.0.1"
    out = "/scratch/bench"
    [validate]                             # a table per command: its keys for that command only, over the top's
    timeout = "20m"

    bench --config site.toml validate --dry-run
    BENCH_CONFIG=site.toml bench run --dry-run

A value is what the option takes on the command line (a list may be a TOML array, a flag true or false); a
relative path (hostfile, out, ...) is read from the profile's folder. The command line overrides the profile, the
profile the defaults; `--dry-run` says where each value came from, and the record of a `bench run` or
`bench validate` keeps it ("sources": option -> "command line" or the profile's path). A bad profile is one
line naming the file and the key, exit 2.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import os
import tomllib
from typing import Any

from bench.core.errors import BadInput

ENV = "BENCH_CONFIG"
MAX_BYTES = 1 << 20
# Options whose values are paths: relative ones are the profile's folder's.
PATHS = ("hostfile", "out", "data_dir", "deepspeed_config", "nvme_path", "topology", "junit", "drain_file",
         "reference", "numerics_reference", "save_numerics_reference", "baseline", "metrics_file", "health_from")
COMMAND_LINE, DEFAULT = "command line", "default"


def add_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", default=None,
                   help=f"a site profile (TOML): any option's value for this site, under the command line's "
                        f"(default: ${ENV}, else none)")


def path_of(args: argparse.Namespace, environ: dict[str, str]) -> tuple[str | None, str]:
    """The profile's path and how it was named: --config, else $BENCH_CONFIG; (None, "") without one."""
    if getattr(args, "config", None):
        return args.config, "--config"
    if environ.get(ENV):
        return environ[ENV], f"${ENV}"
    return None, ""


def read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise BadInput(f"--config: {path}: {e.strerror}") from None
    if len(data) > MAX_BYTES:
        raise BadInput(f"--config: {path}: larger than {MAX_BYTES >> 20} MiB; a profile is a few lines")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BadInput(f"{path}: not a TOML profile: {e}") from None


def _old_name(a: argparse.Action) -> bool:
    """An option's old name (hidden, it says what replaced it): a profile uses the current names."""
    return bool(getattr(a, "note", None))


def _renamed(parsers: dict[str, argparse.ArgumentParser], key: str) -> str | None:
    """What replaced the old option `key`, where a command has it as an old name."""
    flag = "--" + key.replace("_", "-")
    return next((a.note for q in parsers.values() for a in q._actions if flag in a.option_strings and _old_name(a)),
                None)


def _action(p: argparse.ArgumentParser, key: str) -> argparse.Action | None:
    flag = "--" + key.replace("_", "-")
    return next((a for a in p._actions if flag in a.option_strings and not _old_name(a)), None)


def _near(parsers: dict[str, argparse.ArgumentParser], key: str, command: str | None = None) -> str:
    """" (did you mean launcher?)" for a key a letter or two off an option's name; "" for none close."""
    names = {a.option_strings[0][2:] for name, q in parsers.items() if command in (None, name) for a in q._actions
             if a.option_strings and a.option_strings[0].startswith("--") and not _old_name(a)}
    close = difflib.get_close_matches(key.replace("_", "-"), sorted(names), n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def _typed(action: argparse.Action, value: Any, where: str) -> None:
    """A value of a type the option cannot mean is refused: a table, true/false for an option that takes a value,
    a number or an array for a path, a TOML date (a number or an array is the option's text: `max-drain = 2`,
    `micro-batches = [16, 32]`)."""
    if isinstance(value, (bool, dict)):
        raise BadInput(f"{where}: takes a value as on the command line, got {value!r}")
    if action.dest in PATHS and not isinstance(value, str):
        raise BadInput(f"{where}: takes a path (a TOML string), got {value!r}")
    if isinstance(value, (datetime.date, datetime.time)):
        raise BadInput(f"{where}: takes a value as on the command line, got the TOML date {value.isoformat()}")


def _value(action: argparse.Action, value: Any, where: str, folder: str) -> Any:
    """The profile's value as the option would have parsed it; BadInput naming the file and key."""
    if action.nargs == 0:
        if not isinstance(value, bool):
            raise BadInput(f"{where}: a flag takes true or false, got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return value
        return action.const if value else action.default
    _typed(action, value, where)
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    aliases = getattr(action, "value_aliases", {}) or {}
    text = aliases.get(text, text)
    try:
        parsed = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, ValueError, TypeError, BadInput) as e:
        why = str(e) or "invalid value"
        raise BadInput(f"{where}: {why}" if repr(text) in why else f"{where}: {why} ({text!r})") from None
    if action.choices is not None and parsed not in action.choices:
        raise BadInput(f"{where}: {text!r} is not one of {', '.join(map(str, action.choices))}")
    if action.dest in PATHS and isinstance(parsed, str) and not os.path.isabs(os.path.expanduser(parsed)):
        parsed = os.path.normpath(os.path.join(folder, parsed))
    return parsed


def apply(parsers: dict[str, argparse.ArgumentParser], command: str, args: argparse.Namespace,
          environ: dict[str, str]) -> dict[str, str]:
    """The profile's values set on args where the command line gave none; returns each set option's source
    (option -> "command line" or the profile's path). Keys of other commands are theirs; a key no command has, a
    table that is no command, or a value the option refuses is BadInput naming the file and the key."""
    p = parsers[command]
    given = {a.dest: COMMAND_LINE for a in p._actions
             if a.option_strings and a.dest not in ("help", "config") and hasattr(args, a.dest)
             and getattr(args, a.dest) != a.default}
    path, how = path_of(args, environ)
    if path is None:
        return given
    doc, folder = read(path), os.path.dirname(os.path.abspath(path))
    label = path if how == "--config" else f"{path} ({how})"
    values: dict[str, tuple[Any, str]] = {}
    for key, value in doc.items():
        if isinstance(value, dict) and key in parsers:
            # Every table's keys are checked, whichever command runs: a misspelling under [validate] is found by
            # `bench run` too, not left for the night the validate runs.
            for k in value:
                if not _action(parsers[key], k):
                    raise BadInput(f"{path}: [{key}] {k}: bench {key} has no --{k.replace('_', '-')}"
                                   f"{_near(parsers, k, key)}")
            continue
        if not any(_action(q, key) for q in parsers.values()):
            if isinstance(value, dict):
                raise BadInput(f"{path}: [{key}]: not a command (tables: {', '.join(parsers)})")
            renamed = _renamed(parsers, key)
            raise BadInput(f"{path}: {key}: " + (f"{renamed}: a profile uses the current name" if renamed else
                                                 f"no bench command has --{key.replace('_', '-')}"
                                                 f"{_near(parsers, key)}"))
        if _action(p, key):
            values[key] = (value, f"{path}: {key}")
    for key, value in (doc.get(command) or {}).items():
        values[key] = (value, f"{path}: [{command}] {key}")
    sources = dict(given)
    for key, (value, where) in values.items():
        action = _action(p, key)
        assert action is not None
        parsed = _value(action, value, where, folder)
        if action.dest not in given:
            setattr(args, action.dest, parsed)
            sources[action.dest] = label
    return sources


def recorded(args: argparse.Namespace) -> dict[str, str]:
    """What a run's record keeps of where its values came from ("sources": option -> "command line" or the
    profile's path), the list --dry-run prints; {} where bench.cli did not parse the options."""
    return {k: v for k, v in (getattr(args, "_sources", None) or {}).items() if k not in ("dry_run", "config")}


def said(parsers: dict[str, argparse.ArgumentParser], command: str, args: argparse.Namespace,
         sources: dict[str, str]) -> list[str]:
    """The lines --dry-run prints on stderr: every value not a default and where it came from."""
    p = parsers[command]
    lines, seen = [], set()
    for a in p._actions:
        if a.dest in sources and a.option_strings and not _old_name(a) and a.dest not in seen | {"dry_run"}:
            seen.add(a.dest)
            value = getattr(args, a.dest)
            shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
            lines.append(f"  {a.option_strings[0]} {shown}  ({sources[a.dest]})")
    head = f"bench {command}: where the values came from (every other option: its default)"
    return [head, *lines] if lines else [f"bench {command}: every option at its default"]
