"""`east-cache runs RUN...`: training runs side by side, from their folders alone (no torch, no tracker).

Each run folder's log.jsonl (east-train's records: a `run` header per start or resume with the whole recipe, then
`step`, `epoch`, and an `end` or `interrupted` record) and eval.jsonl (--eval-only's figures) make one row: the
options in which the runs differ (only those: run_recipe.py names them), the best validation hmean and its epoch
(or the lowest validation loss, where no run has detection metrics), the last training loss, the median samples/s
of its epochs, its wall time over every start and resume, and its state:

    finished          every epoch done
    stopped (WHY)     --max-steps, --time-limit, a signal (Ctrl-C, SIGTERM), or failed (an error, named); "no end
                      record" when its process is gone without saying why (killed, a power cut)
    running           its last start has no end record and its process is alive: the header's pid on this host;
                      on another host (a shared folder), its log written to within RECENT_S

--plot FILE draws every run's hmean (or validation loss) per epoch on one axis (matplotlib: the `plot` extra).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from east_cache.errors import Input, UsageError, check_output, refuse_overwrite
from east_cache.tools.run_recipe import recipe_of, shown

LOG, EVAL_LOG = "log.jsonl", "eval.jsonl"
RECENT_S = 1800.0    # s: a run started on another host whose log was written to this recently counts as running
CELL = 24            # characters of an option's value shown; longer ones keep their head and tail
METRICS = ("hmean", "val_loss", "loss")   # what best and --plot follow: the first any run has
HIGHER_IS_BETTER = ("hmean",)
PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg")   # what --plot writes, by its name (matplotlib's formats)
DESCRIPTION = """Training runs side by side, from their folders alone: a row per run folder (its log.jsonl, and the
eval.jsonl of --eval-only), the best first. Columns: the options in which the runs differ (only those), the best
validation hmean and its epoch (else the lowest validation loss), the last training loss, the median samples/s of
its epochs, its wall time over every start and resume, and its state: finished; stopped (max-steps, time-limit,
signal, failed, or no end record: its process is gone); running."""
EPILOG = """examples:
  east-cache runs runs/*                          one row per run folder, the options they differ in as columns
  east-cache runs runs/lr* --plot runs.png        and their validation hmean per epoch in one plot"""


@dataclass
class Run:
    folder: Path
    recipe: dict                       # the last start's options (run_recipe.recipe_of)
    epochs: dict[int, dict] = field(default_factory=dict)   # epoch -> its record (a resumed epoch's replaces)
    last_loss: float | None = None
    wall_s: float = 0.0
    state: str = "running"

    def series(self, metric: str) -> list[tuple[int, float]]:
        """(epoch, value) of every epoch that has the metric, finite."""
        return [(e, r[metric]) for e, r in sorted(self.epochs.items())
                if isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])]

    def best(self, metric: str) -> tuple[float, int] | None:
        """(value, epoch) of the best epoch by the metric; the earliest of equals."""
        points = self.series(metric)
        if not points:
            return None
        sign = 1 if metric in HIGHER_IS_BETTER else -1
        epoch, value = max(points, key=lambda p: (sign * p[1], -p[0]))
        return value, epoch

    def samples_per_s(self) -> float | None:
        pace = [r["samples_per_s"] for r in self.epochs.values() if isinstance(r.get("samples_per_s"), (int, float))]
        return statistics.median(pace) if pace else None


def register(sub) -> None:
    """The `runs` subcommand on the east-cache parser's subparsers."""
    p = sub.add_parser("runs", help="training runs side by side: the options they differ in, best hmean and its "
                                    "epoch, last loss, samples/s, wall time, state; --plot their curves",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders (east-train --out), e.g. runs/*")
    p.add_argument("--plot", type=Path, metavar="PNG",
                   help="also draw each run's validation hmean (else validation loss, else loss) per epoch into this "
                        "image file; needs matplotlib: pip install -e \".[plot]\" (default: no plot)")
    p.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    folders = list(dict.fromkeys(a.runs))
    if a.plot is not None:   # before any work: the plot is no input, and it can be written
        check_output(a.plot, "--plot", folder=False)
        refuse_overwrite("--plot", a.plot, [Input(f"the log of run {f}", f / name) for f in folders
                                            for name in (LOG, EVAL_LOG)])
        if a.plot.suffix.lower() not in PLOT_SUFFIXES:
            raise UsageError(f"--plot {a.plot}: name an image file ending in {', '.join(PLOT_SUFFIXES)}")
        plt = pyplot()
    found = [f for f in folders if (f / LOG).is_file()]
    if not found:
        raise UsageError(f"none of {', '.join(map(str, folders))} holds a {LOG}; pass the --out folders of "
                         f"east-train runs, e.g. runs/*")
    for folder in folders:
        if folder not in found:
            print(f"note: {folder}: no {LOG}, not a run folder of east-train; left out", file=sys.stderr)
    runs = [read_run(f) for f in found]
    metric = next((m for m in METRICS if any(r.series(m) for r in runs)), METRICS[0])
    columns = differing(runs)
    print(table(runs, columns, metric))
    if a.plot is not None:
        draw(plt, runs, columns, metric, a.plot)
        print(f"wrote {a.plot}: {metric} per epoch of {len(runs)} run(s)", file=sys.stderr)
    return 0


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install -e \".[plot]\" (or leave --plot out)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def records(path: Path) -> list[dict]:
    """A JSONL log's records; a line that is no JSON object (a run killed while writing it) is left out."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            found.append(r)
    return found


def read_run(folder: Path) -> Run:
    log = records(folder / LOG)
    starts = [i for i, r in enumerate(log) if r.get("event") == "run"] or [0]
    header = log[starts[-1]] if log and log[starts[-1]].get("event") == "run" else {}
    r = Run(folder, recipe_of(header) if header else {})
    for rec in log:
        if rec.get("event") == "epoch" and isinstance(rec.get("epoch"), int):
            r.epochs[rec["epoch"]] = rec
        if rec.get("event") in ("step", "epoch") and isinstance(rec.get("loss"), (int, float)):
            r.last_loss = rec["loss"]
    if (folder / EVAL_LOG).is_file():   # --eval-only of a checkpoint: its figures count where training had none
        for rec in records(folder / EVAL_LOG):
            epoch = rec.get("epoch")
            if isinstance(epoch, int) and "hmean" not in r.epochs.get(epoch, {}):
                r.epochs[epoch] = {**r.epochs.get(epoch, {"epoch": epoch}),
                                   **{k: rec[k] for k in ("precision", "recall", "hmean") if k in rec}}
    mtime = (folder / LOG).stat().st_mtime
    segments = [log[s:e] for s, e in zip(starts, [*starts[1:], len(log)])]
    r.state = state_of(segments[-1], header, mtime)
    r.wall_s = sum(wall_seconds(seg, mtime if k == len(segments) - 1 else None) for k, seg in enumerate(segments))
    return r


def state_of(segment: list[dict], header: dict, mtime: float) -> str:
    """How the last start of a run ended, or that it still runs (the module's docstring)."""
    for rec in reversed(segment):
        if rec.get("event") == "end":
            reason = rec.get("reason")
            return "finished" if reason == "finished" else \
                f"stopped (failed: {rec.get('error')})" if reason == "failed" else f"stopped ({reason})"
        if rec.get("event") == "interrupted":
            return "stopped (signal)"
    if "pid" not in header:   # a log from before end records were written
        epochs = [rec["epoch"] for rec in segment if rec.get("event") == "epoch"]
        return "finished" if epochs and epochs[-1] >= header.get("config", {}).get("epochs", math.inf) else "unknown"
    if header.get("host") == socket.gethostname():
        return "running" if alive(header["pid"]) else "stopped (no end record)"
    if time.time() - mtime < RECENT_S:
        return f"running (on {header.get('host')})"
    return "stopped (no end record)"


def alive(pid) -> bool:
    """Whether a process of that id exists on this host (one we may not signal exists too)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def seconds_of(stamp) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return None


def wall_seconds(segment: list[dict], mtime: float | None) -> float:
    """From a start's header to its last record with a time (an epoch, the end); for the last start without an end
    record (running, or killed), to the log's last write when that is later (its step records have no time)."""
    stamps = [t for t in (seconds_of(rec.get("time")) for rec in segment) if t is not None]
    if not stamps:
        return 0.0
    end = max(stamps[1:] or stamps[:1])
    ended = any(rec.get("event") in ("end", "interrupted") for rec in segment)
    return max(end, mtime if mtime is not None and not ended else end) - stamps[0]


def differing(runs: list[Run]) -> list[str]:
    """The options whose values are not the same in every run, in the recipe's order."""
    keys = list(dict.fromkeys(k for r in runs for k in r.recipe))
    return [k for k in keys if len({json.dumps(r.recipe.get(k), sort_keys=True) for r in runs}) > 1]


def cell(value) -> str:
    text = shown(value)
    return text if len(text) <= CELL else f"{text[:8]}…{text[-(CELL - 9):]}"


def duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def table(runs: list[Run], columns: list[str], metric: str) -> str:
    """The runs best first by the metric (those without it last), as aligned text."""
    better = 1 if metric in HIGHER_IS_BETTER else -1
    ordered = sorted(runs, key=lambda r: (r.best(metric) is None, -better * (r.best(metric) or (0, 0))[0]))
    head = ["run", *columns, f"best {metric}", "epoch", "last loss", "samples/s", "wall", "state"]
    rows = [head]
    for r in ordered:
        best = r.best(metric)
        rows.append([str(r.folder), *(cell(r.recipe.get(k)) for k in columns),
                     f"{best[0]:.4f}" if best else "-", str(best[1]) if best else "-",
                     f"{r.last_loss:.4f}" if r.last_loss is not None else "-",
                     f"{r.samples_per_s():.3g}" if r.samples_per_s() is not None else "-",
                     duration(r.wall_s), r.state])
    widths = [max(len(row[j]) for row in rows) for j in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def draw(plt, runs: list[Run], columns: list[str], metric: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        points = r.series(metric)
        options = ", ".join(f"{k}={cell(r.recipe.get(k))}" for k in columns)
        label = f"{r.folder}" + (f" ({options})" if options else "")
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
