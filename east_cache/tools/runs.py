"""`east-cache runs RUN...`: training runs side by side, from their folders alone (no torch, no tracker).

Each run folder's log.jsonl (east-train's records: a `run` header per start or resume with the whole recipe, then
`step`, `epoch`, and an `end` or `interrupted` record) and eval.jsonl (--eval-only's figures) make one row, the run
named by the shortest tail of its folder's path that tells it from the others: the options in which the runs differ
(only those, one column each, holding the value the run used: the augmentation's effective value, the flag over the
cache's, not the flag and the cache's value apart; options of the run's length and its checking and bookkeeping,
APART, only with --all), the best validation hmean and its epoch (or the lowest validation loss, where no run has
detection metrics), the last training loss, the median samples/s of its epochs, its wall time over every start and
resume, and its state. The table keeps within WIDTH characters: the options that do not fit are folded under it as
`option: value` lines per run. The states:

    finished          every epoch done
    stopped (WHY)     --max-steps, --time-limit, a signal (Ctrl-C, SIGTERM), or failed (an error, named); "no end
                      record" when its process is gone without saying why (killed, a power cut)
    running           its last start has no end record and its process is alive: the header's pid on this host;
                      on another host (a shared folder), its log written to within RECENT_S

--plot FILE draws two panels across the figure, each run's training loss per logged step and its hmean (or
validation loss) per epoch, one colour per run, and under them a table of the runs (their short names in their
colours) and the options they differ in (matplotlib: the `plot` extra).
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

from east_cache.atomic import writing
from east_cache.errors import UsageError
from east_cache.inputs import Input, check_output, refuse_overwrite
from east_cache.tools.run_recipe import effective, recipe_of, records, text_of

LOG, EVAL_LOG = "log.jsonl", "eval.jsonl"
RUN_FILES = (LOG, EVAL_LOG, "*.pt", "report.json")   # what a run folder holds of its own, which --plot never replaces
RECENT_S = 1800.0    # s: a run started on another host whose log was written to this recently counts as running
CELL = 24            # characters of an option's value shown; longer ones keep their head and tail
WIDTH = 100          # characters of the table; options that do not fit are folded under it as `option: value`
# Options that describe the run's length, its checking or its bookkeeping, not what it trains: the table shows them
# only with --all. (--epochs is a recipe option: the lr drops x0.1 at half the epochs.)
APART = ("max_steps", "time_limit", "check_run", "eval_every", "val_data", "val_split", "val_cache",
         "val_cache.fingerprint", "keep_last", "save_every", "save_every_steps", "log_every", "max_bad_steps",
         "workers", "threads", "nvjpeg", "compile", "profile", "rebuild", "local_cache", "local_cache_limit",
         "node_share", "nodes", "node_rank")
PLOT_CHARS = 140     # characters across the table under a plot (12 inches at 9 pt); options past them are named
PLOT_CELL = 14       # characters of a value in that table
METRICS = ("hmean", "val_loss", "loss")   # what best and --plot follow: the first any run has
HIGHER_IS_BETTER = ("hmean",)
PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg")   # what --plot writes, by its name (matplotlib's formats)
DESCRIPTION = """Training runs side by side, from their folders alone: a row per run folder (its log.jsonl, and the
eval.jsonl of --eval-only), the best first, each named by its folder. Columns: the options in which the runs
differ (only those, each with the value the run used; those of its length, checking and bookkeeping with --all;
those past 100 characters as `option: value` lines under the table), the best validation hmean and its epoch (else
the lowest validation loss), the last training loss, the median samples/s of its epochs, its wall time over every
start and resume, and its state: finished; stopped (max-steps, time-limit, signal, failed, or no end record: its
process is gone); running."""
EPILOG = """examples:
  east-cache runs runs/*                          one row per run folder, the options they differ in as columns
  east-cache runs runs/* --all                    also the options of length, checking and bookkeeping
  east-cache runs runs/lr* --plot runs.png        and their loss per step and hmean per epoch in one figure"""


@dataclass
class Run:
    folder: Path
    recipe: dict                       # the last start's options (report.recipe.recipe_of, effective)
    epochs: dict[int, dict] = field(default_factory=dict)   # epoch -> its record (a resumed epoch's replaces)
    losses: dict[int, float] = field(default_factory=dict)  # step -> the training loss logged there
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
                   help="also draw each run's training loss per step and its validation hmean (else validation loss) "
                        "per epoch, with a table of the options they differ in, into this image file; needs "
                        "matplotlib: pip install -e \".[plot]\" (default: no plot)")
    p.add_argument("--all", action="store_true",
                   help="also the options of the run's length, checking and bookkeeping (" + ", ".join(APART[:6]) +
                        ", ...) (default: the options of what is trained)")
    p.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    folders = list(dict.fromkeys(a.runs))
    if a.plot is not None:   # before any work: the plot is no input, and it can be written
        check_output(a.plot, "--plot", folder=False)
        refuse_overwrite("--plot", a.plot, [Input(f"a file of run {f} (its logs, checkpoints, report.json)", f,
                                                  tree=True, reads=RUN_FILES) for f in folders])
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
    columns = differing(runs, a.all)
    names = [printable(n) for n in short_names([r.folder for r in runs])]
    print(table(runs, names, columns, metric))
    if a.plot is not None:
        draw(plt, runs, names, columns, metric, a.plot)
        print(f"wrote {a.plot}: loss per step and {metric} per epoch of {len(runs)} run(s)", file=sys.stderr)
    return 0


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install -e \".[plot]\" (or leave --plot out)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_run(folder: Path) -> Run:
    log = records(folder / LOG)
    starts = [i for i, r in enumerate(log) if r.get("event") == "run"] or [0]
    header = log[starts[-1]] if log and log[starts[-1]].get("event") == "run" else {}
    damaged = [k for k in ("config", "cache_config", "augment", "transform", "code_version")
               if k in header and not isinstance(header[k], (dict, type(None)))
               or k == "config" and k in header and header[k] is None]
    header = {**header, **{k: {} for k in damaged}}
    r = Run(folder, effective(recipe_of(header)) if header else {})
    for rec in log:
        if rec.get("event") == "epoch" and isinstance(rec.get("epoch"), int):
            r.epochs[rec["epoch"]] = rec
        if rec.get("event") in ("step", "epoch") and isinstance(rec.get("loss"), (int, float)):
            r.last_loss = rec["loss"]
            if rec.get("event") == "step" and isinstance(rec.get("step"), int) and math.isfinite(rec["loss"]):
                r.losses[rec["step"]] = rec["loss"]   # a resumed run's step replaces the stopped run's
    if (folder / EVAL_LOG).is_file():   # --eval-only of a checkpoint: its figures count where training had none
        for rec in records(folder / EVAL_LOG):
            epoch = rec.get("epoch")
            if isinstance(epoch, int) and "hmean" not in r.epochs.get(epoch, {}):
                r.epochs[epoch] = {**r.epochs.get(epoch, {"epoch": epoch}),
                                   **{k: rec[k] for k in ("precision", "recall", "hmean") if k in rec}}
    mtime = (folder / LOG).stat().st_mtime
    segments = [log[s:e] for s, e in zip(starts, [*starts[1:], len(log)])]
    r.state = state_of(segments[-1], header, mtime)
    if damaged:   # the row says what it could not read
        r.state += f"; log header's {', '.join(damaged)} unreadable"
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
    except (ProcessLookupError, OverflowError):   # none, or no process id at all
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


def differing(runs: list[Run], every: bool = False) -> list[str]:
    """The options whose values are not the same in every run, in the recipe's order; those of APART only when
    `every`."""
    keys = list(dict.fromkeys(k for r in runs for k in r.recipe))
    return [k for k in keys if (every or k not in APART)
            and len({json.dumps(r.recipe.get(k), sort_keys=True) for r in runs}) > 1]


def short_names(folders: list[Path]) -> list[str]:
    """Each folder by the shortest tail of its path (whole components) that no other folder's path ends with."""
    parts = [Path(os.path.normpath(f)).parts or (str(f),) for f in folders]
    names = []
    for mine in parts:
        for n in range(1, len(mine) + 1):
            tail = mine[-n:]
            if n == len(mine) or not any(p != mine and p[-n:] == tail for p in parts):
                names.append(str(Path(*tail)))
                break
    return names


def printable(text: str) -> str:
    """text on one line: a newline, a tab or another character that is not printable shown escaped (\\n)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def cell(value, most: int = CELL) -> str:
    text = printable(text_of(value))
    return text if len(text) <= most else f"{text[:most // 3]}…{text[-(most - most // 3 - 1):]}"


def duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def best_first(runs: list[Run], metric: str) -> list[int]:
    """The runs' indices, best first by the metric (those without it last)."""
    better = 1 if metric in HIGHER_IS_BETTER else -1
    return sorted(range(len(runs)), key=lambda i: (runs[i].best(metric) is None,
                                                   -better * (runs[i].best(metric) or (0, 0))[0]))


def by_spread(runs: list[Run], columns: list[str]) -> list[str]:
    """The columns by how many values the runs hold in each, most first (the recipe's order among equals)."""
    return sorted(columns, key=lambda k: -len({json.dumps(r.recipe.get(k), sort_keys=True) for r in runs}))


def table(runs: list[Run], names: list[str], columns: list[str], metric: str, width: int = WIDTH) -> str:
    """The runs best first by the metric, as aligned text within `width` characters: as many option columns as fit
    (those of most values first), in the recipe's order, the others as `option: value` lines under the table, a line
    per run."""
    order = best_first(runs, metric)
    figures = []
    for r in runs:
        best = r.best(metric)
        figures.append([f"{best[0]:.4f}" if best else "-", str(best[1]) if best else "-",
                        f"{r.last_loss:.4f}" if r.last_loss is not None else "-",
                        f"{r.samples_per_s():.3g}" if r.samples_per_s() is not None else "-",
                        duration(r.wall_s), printable(r.state)])
    head = [f"best {metric}", "epoch", "last loss", "samples/s", "wall", "state"]
    fixed = [max(len(names[i]) for i in order) if runs else 3, *(max([len(h)] + [len(f[j]) for f in figures])
                                                                  for j, h in enumerate(head))]
    used = sum(fixed) + 2 * (len(fixed) - 1)
    shown_cols = []
    for k in by_spread(runs, columns):   # the options of most values first: a sweep's subject before a bystander
        w = max([len(k)] + [len(cell(r.recipe.get(k))) for r in runs])
        if used + 2 + w <= width:
            shown_cols.append(k)
            used += 2 + w
    shown_cols = [k for k in columns if k in shown_cols]
    folded = [k for k in columns if k not in shown_cols]
    rows = [["run", *shown_cols, *head]]
    rows += [[names[i], *(cell(runs[i].recipe.get(k)) for k in shown_cols), *figures[i]] for i in order]
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if folded:
        lines.append(f"and {len(folded)} more option(s) they differ in:")
        pad = max(len(names[i]) for i in order)
        for i in order:
            pairs = [f"{k}: {cell(runs[i].recipe.get(k))}" for k in folded]
            line = f"  {names[i].ljust(pad)}  "
            for n, pair in enumerate(pairs):
                piece = pair + ("," if n < len(pairs) - 1 else "")
                if len(line) + len(piece) > width and line.strip() != names[i]:
                    lines.append(line.rstrip())
                    line = " " * (pad + 4)
                line += piece + " "
            lines.append(line.rstrip())
    return "\n".join(lines)


def draw(plt, runs: list[Run], names: list[str], columns: list[str], metric: str, path: Path) -> None:
    """Loss per step and the metric per epoch, two panels across the figure, and a table of the runs under them: the
    options that fit PLOT_CHARS as columns, the others named in its last line."""
    order = best_first(runs, metric)
    colours = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors
    best = [runs[i].best(metric) for i in order]
    body = [[names[i]] for i in order]
    head, used, left = ["run"], max(len(n) for n in names) + 3, []
    for k in by_spread(runs, columns):
        w = max(len(k), *(len(cell(r.recipe.get(k), PLOT_CELL)) for r in runs)) + 3
        if used + w > PLOT_CHARS - 24:   # room for the best metric's column
            left.append(k)
        else:
            used += w
    for k in (k for k in columns if k not in left):
        head.append(k)
        for row, i in zip(body, order):
            row.append(cell(runs[i].recipe.get(k), PLOT_CELL))
    left = [k for k in columns if k in left]
    head.append(f"best {metric}")
    for row, b in zip(body, best):
        row.append(f"{b[0]:.4f} (epoch {b[1]})" if b else "-")
    lines = len(body) + 1 + bool(left)
    fig = plt.figure(figsize=(12, 4.4 + 0.25 * lines), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[4.2, 0.25 * lines])
    loss_ax, metric_ax, table_ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
    for k, i in enumerate(order):
        r, colour = runs[i], colours[k % len(colours)]
        steps = sorted(r.losses.items())
        if steps:
            xs, ys = [s for s, _ in steps], [v for _, v in steps]
            few = len(xs) <= 30
            loss_ax.plot(xs, ys, color=colour, lw=1.2 if few else 0.6, alpha=1 if few else 0.3,
                         marker="." if few else None)
            if not few:   # a running mean over about a twentieth of the run, so that runs compare
                n = max(2, len(ys) // 20)
                loss_ax.plot(xs[n - 1:], [sum(ys[j - n + 1:j + 1]) / n for j in range(n - 1, len(ys))],
                             color=colour, lw=1.6)
        points = r.series(metric)
        if points:
            metric_ax.plot([p[0] for p in points], [p[1] for p in points], color=colour, marker="o", ms=4, lw=1.6)
    loss_ax.set(xlabel="step", ylabel="training loss", title="training loss per logged step")
    metric_ax.set(xlabel="epoch", ylabel=metric, title=f"{metric} per epoch")
    if metric == "hmean":
        top = max(0.05, *(b[0] * 1.05 for b in best if b))
        metric_ax.set_ylim(-0.02 * top, top)   # a run at 0 (a short one) stays in sight
    metric_ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in (loss_ax, metric_ax):
        ax.grid(alpha=0.3)
    table_ax.axis("off")
    t = table_ax.table(cellText=body, colLabels=head, loc="upper left", cellLoc="left", colLoc="left",
                       edges="horizontal")
    t.auto_set_font_size(False)
    t.set_fontsize(9)
    t.auto_set_column_width(list(range(len(head))))
    for k in range(len(body)):
        t[k + 1, 0].get_text().set(color=colours[k % len(colours)], fontweight="bold")
    if left:
        table_ax.text(0, 0, f"they also differ in {', '.join(left)}: `east-cache runs` lists them", fontsize=9,
                      transform=table_ax.transAxes, va="bottom")
    with writing(path, "wb", "--plot") as f:   # a link at path is replaced, never written through
        fig.savefig(f, dpi=100, format=path.suffix.lower()[1:])
    plt.close(fig)
