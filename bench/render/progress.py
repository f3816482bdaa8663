"""Progress on stderr: a run's step bar, and what `bench sweep` shows (the plan, a line per point, an ETA).

On a terminal a rich bar shows points done/left and the ETA; elsewhere (logs,
CI) each finished point is one greppable line:

    sweep batch: [2/4] batch/mb=32/gpus=2: ok 251.6 img/s in 15.5 s; 2 left, ETA 31 s
"""

from __future__ import annotations

import json
import sys
from typing import Any



def _count(v: Any) -> int:
    """A progress's step, total or epoch as the bar draws it: 0 for what is not a count (a progress is a rank's
    word: bench.core.conversation.words checks it, and a bar never raises for one)."""
    return v if type(v) is int and v >= 0 else 0


class StepBar:
    """A run's steps, epoch and loss as a rich bar on a terminal (nothing elsewhere); fed by execute's on_progress."""

    def __init__(self, enabled: bool = True):
        self.bar = None
        self.task = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn("[bold]steps"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("epoch {task.fields[epoch]}"), TextColumn("loss {task.fields[loss]}"),
                                TimeElapsedColumn(), TimeRemainingColumn(), transient=True,
                                console=Console(stderr=True))

    def update(self, prog: dict[str, Any]) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("run", total=_count(prog.get("total")) or None, loss="-", epoch="-")
        loss = prog.get("loss")
        self.bar.update(self.task, completed=_count(prog.get("step")),
                        loss=f"{loss:.3f}" if isinstance(loss, (int, float)) and not isinstance(loss, bool) else "-",
                        epoch=f"{_count(prog.get('epoch')) or '-'}/{_count(prog.get('epochs')) or '-'}")

    def close(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.stop()


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


class SweepProgress:
    """Points done/left and an ETA from the mean duration of the points run so far."""

    def __init__(self, name: str, *, quiet: bool = False):
        self.name, self.quiet = name, quiet
        self.planned = self.done = 0
        self.durations: list[float] = []
        self.bar = None
        self.task = None

    def begin(self, planned: int, already: int, past_durations: list[float]) -> None:
        """The sweep starts: `planned` points, `already` of them recorded before (their durations for the ETA)."""
        name, quiet = self.name, self.quiet
        self.planned, self.done, self.durations = planned, already, list(past_durations)
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(f"[bold]sweep {name}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total} points"), TextColumn("ETA {task.fields[eta]}"),
                                TextColumn("{task.fields[current]}"), TimeElapsedColumn(),
                                console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=planned, completed=already, eta=self._eta(), current="")
        if not quiet and already:
            self._say(f"sweep {name}: {already} of {planned} point(s) already recorded, skipped")

    def _eta(self) -> str:
        left = self.planned - self.done
        if not left:
            return "0 s"
        if not self.durations:
            return "-"
        return _secs(left * sum(self.durations) / len(self.durations))

    def _say(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def grow(self, added: int) -> None:
        """Points a finished point asked for (memory --find-max-batch): the total grows."""
        self.planned += added
        if self.bar is not None:
            self.bar.update(self.task, total=self.planned)

    def start(self, p: Any) -> None:
        if self.bar is not None:
            self.bar.update(self.task, current=p.id)
        elif not self.quiet:
            self._say(f"sweep {self.name}: [{self.done + 1}/{self.planned}] {p.id}: running")

    def finish(self, p: Any, rec: dict[str, Any]) -> None:
        self.done += 1
        if isinstance(rec.get("duration_s"), (int, float)):
            self.durations.append(rec["duration_s"])
        fig = rec.get("figures") or {}
        what = f"{fig['images_per_s']:,.1f} img/s" if fig else (rec.get("error") or {}).get("reason", "")
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, eta=self._eta(), current="")
        if not self.quiet:
            self._say(f"sweep {self.name}: [{self.done}/{self.planned}] {p.id}: {rec['status']} {what} "
                      f"in {_secs(rec.get('duration_s'))}; {self.planned - self.done} left, ETA {self._eta()}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def summary(self, s: dict[str, Any]) -> None:
        counts: dict[str, int] = {}
        for p in s["points"]:
            counts[p["status"]] = counts.get(p["status"], 0) + 1
        tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        print(f"sweep {s['sweep']}: {s['status']}: {tally}; launched {len(s['launched'])}, "
              f"skipped {len(s['skipped'])}", file=sys.stderr)
        print(f"results: {s['dir']}/results.jsonl  (bench report {s['dir']})", file=sys.stderr)


def print_plan(suite: str, sweep_dir: str, points: list[Any], done: dict[str, dict[str, Any]], *,
               as_json: bool) -> None:
    """The planned points, and which of them an existing sweep already holds."""
    def state(p: Any) -> str:
        return done[p.id]["status"] if p.id in done else "to run"

    if as_json:
        print(json.dumps({"suite": suite, "dir": sweep_dir,
                          "points": [{**p.to_dict(), "state": state(p)} for p in points]}))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    model = ", ".join(sorted({p.config.model for p in points}))
    t = Table(title=f"bench sweep {suite} --dry-run: {len(points)} point(s) of {model} -> {sweep_dir}",
              box=box.SIMPLE, title_justify="left")
    for col in ("point", "gpus", "where", "micro", "accum", "global", "ZeRO", "prec", "engine", "data",
                "length", "state"):
        t.add_column(col, no_wrap=True)
    for p in points:
        c = p.config
        length = f"{c.steps} steps" if c.steps is not None else (f"{c.epochs:g} epochs" if c.epochs else "50 steps")
        where = p.include or f"--gpus {p.gpus}"
        engine = c.engine + (f" {c.pipeline_stages} stages" if c.pipeline_stages > 1 else "") + (
            " kept" if c.engine == "fsdp2" and not c.reshard_after_forward else "") + (
            f" tp{c.tensor_parallel}" if c.tensor_parallel > 1 else "")
        data_parallel = p.gpus // (c.pipeline_stages * c.tensor_parallel)
        t.add_row(p.id, str(p.gpus), where, str(c.micro_batch), str(c.grad_accum),
                  str(c.micro_batch * c.grad_accum * data_parallel),
                  "-" if c.engine != "deepspeed" else f"{c.zero_stage}{'+' + c.offload if c.offload else ''}",
                  c.precision, engine, f"{c.dataset} x{c.dataset_fraction:g}", length, state(p))
    # Logs and pipes get the whole table, not one folded to 80 columns.
    Console(stderr=True, width=None if sys.stderr.isatty() else 200).print(t)
