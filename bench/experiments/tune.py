"""bench tune's driver: bisection for the micro batch per strategy, then successive halving, on the sweep engine.

    tuner = Tuner(base, hosts, pool, opts, tune_dir, run_one=train.run, view=progress, capacity=None)
    doc = tuner.tune()          # tune.json's content; trials are points of one sweep folder (suite "tune")

Every trial is a sweep point (bench.experiments.sweep: open_sweep checks the
config of an id planned again, run_points runs and appends the record), so
a tune folder resumes like a sweep: the search is replayed from the records,
and a trial whose id is recorded ok or oom is not run again. Every recorded
trial counts against --budget, also those of earlier invocations.

Phases (bench.experiments.tune_search decides, this runs):
  fit      per strategy, at its largest GPU count, bisection over the micro batches
           for the largest that fits (each OOM a recorded trial). Strategies go
           in order of predicted memory, smallest first: an OOM of one is taken
           for every strategy predicted to need at least as much (recorded as
           pruned, with the reason), and its ceiling is the next one's first probe.
  rung 0   every (strategy, GPU count) at its ceiling, short trials (--trial-steps)
  halving  the better half runs twice as long, while more than two are left and the
           budget covers the rung and the finals
  finals   the best two, --repeats runs each at twice the last length (fewer when
           the budget is short): the spread the tie rule needs
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from bench.analysis import tune as figures
from bench.analysis import tune_memory
from bench.cluster.hostfile import HostSelection
from bench.core import parallel, results
from bench.core.config import RunConfig
from bench.core.errors import EXIT_INTERRUPTED
from bench.experiments import suites, sweep
from bench.experiments.pool import Pool, packed
from bench.experiments.tune_search import Candidate, Space, Strategy, TuneOptions, ceiling, finals_repeats, halve, \
    next_probe


class Stop(Exception):
    """No more trials: the budget is spent (why) or the user pressed Ctrl-C."""

    def __init__(self, status: str, why: str):
        super().__init__(why)
        self.status, self.why = status, why


class Tuner:
    def __init__(self, base: RunConfig, hosts: HostSelection, pool: Pool, opts: TuneOptions, tune_dir: str, *,
                 run_one: Callable[..., dict[str, Any] | None], view, capacity: int | None):
        self.base, self.hosts, self.pool, self.opts, self.dir = base, hosts, pool, opts, tune_dir
        self.run_one, self.view, self.capacity = run_one, view, capacity
        self.space = Space.build(base, opts, pool)
        classes = 100 if base.dataset == "cifar100" else 10
        self.dims = tune_memory.vit_dims(base.model, base.img_size, classes)
        self.trials: dict[str, dict[str, Any]] = {}
        self.ceilings: dict[str, int | None] = {}
        self.predicted: dict[str, dict[str, Any]] = {}
        self.rpath = os.path.join(tune_dir, "results.jsonl")
        self.started = time.monotonic()

    # --- one trial -------------------------------------------------------------------------------------
    def point(self, c: Candidate, steps: int, rep: int, phase: str) -> suites.Point:
        cfg = Strategy.of(c.strategy).apply(self.base).replace(
            micro_batch=c.micro_batch, grad_accum=c.grad_accum, steps=steps, epochs=None,
            timing_warmup=min(self.base.timing_warmup, steps // 2))
        labels = {**c.to_dict(), "steps": steps, "repeat": rep, "phase": phase}
        return suites.make_point("tune", c.trial_id(steps, rep), cfg, self.pool, packed(self.pool, c.gpus), labels)

    def _recorded(self) -> list[dict[str, Any]]:
        return results.read(self.rpath).records if os.path.exists(self.rpath) else []

    def spent(self) -> tuple[int, float]:
        recs = self._recorded()
        return len(recs), sum(r.get("duration_s") or 0.0 for r in recs)

    def _check_budget(self) -> None:
        runs, seconds = self.spent()
        if self.opts.budget_runs is not None and runs >= self.opts.budget_runs:
            raise Stop("budget", f"the budget of {self.opts.budget_runs} run(s) is spent")
        if self.opts.budget_minutes is not None:
            recs = [r.get("duration_s") or 0.0 for r in self._recorded()]
            guess = sum(recs) / len(recs) if recs else 0.0
            if seconds + guess > self.opts.budget_minutes * 60:
                raise Stop("budget", f"another trial (~{guess:.0f} s) would pass the budget of "
                                     f"{self.opts.budget_minutes:g} minute(s) ({seconds:.0f} s spent)")

    def left(self) -> int | None:
        return None if self.opts.budget_runs is None else max(self.opts.budget_runs - self.spent()[0], 0)

    def trial(self, c: Candidate, steps: int, rep: int, phase: str) -> dict[str, Any]:
        p = self.point(c, steps, rep, phase)
        if p.id in self.trials:
            return self.trials[p.id]
        done = sweep.open_sweep(self.dir, "tune", self.base, self.opts, self.pool, [p])
        rec = done.get(p.id)
        if rec is None or rec["status"] not in sweep.DONE_STATUSES:
            self._check_budget()
            rc = sweep.run_points([p], self.hosts, self.dir, {}, run_one=self.run_one, view=self.view)
            if rc == EXIT_INTERRUPTED:
                raise Stop("interrupted", "interrupted (Ctrl-C): the finished trials are kept")
            rec = sweep.peek_done(self.dir).get(p.id, {"status": "failed", "error": {"reason": "no record"}})
        t = {"id": p.id, "candidate": c.to_dict(), "steps": steps, "repeat": rep, "phase": phase,
             "status": rec["status"], "duration_s": rec.get("duration_s"), "run_dir": rec.get("run_dir"),
             "figures": figures.trial_figures(rec), "reason": (rec.get("error") or {}).get("reason"),
             "predicted": self.prediction(c)}
        self.trials[p.id] = t
        return t

    # --- memory ----------------------------------------------------------------------------------------
    def prediction(self, c: Candidate) -> dict[str, Any] | None:
        if self.dims is None:
            return None
        if c.key not in self.predicted:
            s = Strategy.of(c.strategy)
            res = packed(self.pool, c.gpus)
            p = tune_memory.predict(self.dims, n=c.gpus, stage=s.sharded, precision=self.base.precision,
                                    offload=s.offload, micro_batch=c.micro_batch,
                                    gpus_per_node=max(len(v) for v in res.values()), nodes=len(res),
                                    checkpointing=self.base.activation_checkpointing, tensor=s.tensor)
            if self.pool.device != "cuda":   # CPU nodes: offloaded states live in the same memory
                p["total"] = p["total"] + p["host_states"]
            self.predicted[c.key] = p
        return self.predicted[c.key]

    def memory_note(self) -> str:
        if self.pool.device != "cuda":
            return ("CPU nodes have no device memory: nothing is pruned by predicted memory; host memory (a memory "
                    "cgroup where bench runs in one) is the wall, and each OOM is a recorded trial")
        if self.capacity is None:
            return "the inventory gave no GPU memory size: nothing is pruned by predicted memory"
        if self.dims is None:
            return f"no memory formula for {self.base.model}: nothing is pruned by predicted memory"
        return (f"predicted model states + activations per rank against {1 - tune_memory.HEADROOM:.0%} of the "
                f"smallest GPU's {self.capacity / 2**30:.1f} GiB")

    def fits(self, c: Candidate) -> bool:
        """False (and recorded as pruned, with the numbers) when the data or the prediction cannot hold it."""
        size = self.base.synthetic_size if self.base.dataset == "synthetic" else 50_000
        share = int(size * self.base.dataset_fraction) // c.gpus
        if c.micro_batch > share:
            self.space.prune(c, f"the training set leaves {share} images per rank over {c.gpus} rank(s), fewer "
                                f"than micro batch {c.micro_batch}")
            return False
        t = Strategy.of(c.strategy).tensor
        if t > 1 and parallel.layout(packed(self.pool, c.gpus), t)["tp_spans_nodes"]:
            self.space.prune(c, f"a tensor-parallel group of {t} would span nodes on {c.gpus} rank(s) packed onto "
                                "the pool's nodes")
            return False
        p = self.prediction(c)
        if self.pool.device != "cuda" or self.capacity is None or p is None or tune_memory.fits(p["total"],
                                                                                               self.capacity):
            return True
        self.space.prune(c, f"predicted {p['total'] / 2**30:.2f} GiB per rank (model states "
                            f"{p['model_states'] / 2**30:.2f} + activations {p['activations'] / 2**30:.2f}) > "
                            f"{1 - tune_memory.HEADROOM:.0%} of the smallest GPU's {self.capacity / 2**30:.1f} GiB")
        return False

    # --- phases ----------------------------------------------------------------------------------------
    def _cand(self, s: str, n: int, m: int) -> Candidate | None:
        accum = dict(self.space.pairs(n, Strategy.of(s).tensor)).get(m)
        return None if accum is None else Candidate(s, n, m, accum)

    def fit(self) -> None:
        def order(s: str) -> tuple[float, str]:
            n = max(self.space.counts_for(s))
            c = self._cand(s, n, self.space.pairs(n, Strategy.of(s).tensor)[0][0])
            p = self.prediction(c) if c else None
            return (p["total"] if p else float("inf"), s)

        ooms: list[tuple[str, int, float]] = []      # (strategy, micro, predicted total at that micro)
        hint = None
        for s in sorted(self.space.strategies, key=order):
            n = max(self.space.counts_for(s))
            ladder = [m for m, _ in self.space.pairs(n, Strategy.of(s).tensor) if self.fits(self._cand(s, n, m))]
            ladder = sorted(set(ladder))
            known: dict[int, str] = {}
            for other, m, total in ooms:
                c = self._cand(s, n, m)
                p = self.prediction(c) if c else None
                if m in ladder and p is not None and p["total"] >= total and m not in known:
                    known[m] = "oom"
                    self.space.prune(c, f"inferred out of memory: {other} ran out of memory at micro batch {m} on "
                                        f"{n} rank(s) and {s} is predicted to need at least as much "
                                        f"({p['total'] / 2**20:.0f} MiB vs {total / 2**20:.0f} MiB per rank)")
            while (m := next_probe(ladder, known, hint)) is not None:
                t = self.trial(self._cand(s, n, m), self.opts.trial_steps, 1, "fit")
                known[m] = "ok" if t["status"] == "ok" else "oom"
                if t["status"] == "oom":
                    ooms.append((s, m, (self.prediction(self._cand(s, n, m)) or {}).get("total", float("inf"))))
            self.ceilings[s] = ceiling(ladder, known)
            hint = self.ceilings[s] if self.ceilings[s] is not None else hint

    def rung0(self) -> None:
        for s in self.space.strategies:
            top = self.ceilings.get(s)
            if top is None:
                continue
            for n in self.space.counts_for(s):
                fit = [m for m, _ in self.space.pairs(n, Strategy.of(s).tensor) if m <= top]
                if fit and self.fits(c := self._cand(s, n, max(fit))):
                    self.trial(c, self.opts.trial_steps, 1, "rung0")

    def _alive(self, steps: int) -> list[Candidate]:
        rows = figures.rank([t for t in self.trials.values() if t["steps"] <= steps])
        return [Candidate(r["strategy"], r["gpus"], r["micro_batch"], r["grad_accum"]) for r in rows
                if r["steps"] == steps]

    def halving(self) -> None:
        steps = self.opts.trial_steps
        alive = self._alive(steps)
        while len(alive) > 2:
            keep = halve(len(alive))
            left = self.left()
            if left is not None and keep + 2 * min(2, self.opts.repeats) > left:
                break
            steps *= 2
            for c in alive[:keep]:
                self.trial(c, steps, 1, f"rung{steps // self.opts.trial_steps}")
            alive = self._alive(steps)
        finalists = alive[:2]
        if not finalists:
            return
        left = self.left()
        if left is None:
            steps, reps = steps * 2, self.opts.repeats
        elif (r := finals_repeats(left, len(finalists), self.opts.repeats)) >= min(2, self.opts.repeats):
            steps, reps = steps * 2, r
        else:
            # Not enough for a longer length: repeat at this one, whose rung trial is the first run.
            reps = finals_repeats(left, len(finalists), self.opts.repeats, have=1)
        for rep in range(1, reps + 1):
            for c in finalists:
                self.trial(c, steps, rep, "finals")

    def tune(self) -> tuple[str, str | None]:
        """Run the search; (status, why it stopped early or None). self.trials holds every trial."""
        try:
            self.fit()
            self.rung0()
            self.halving()
        except Stop as e:
            return e.status, e.why
        except KeyboardInterrupt:
            return "interrupted", "interrupted (Ctrl-C): the finished trials are kept"
        return "ok", None
