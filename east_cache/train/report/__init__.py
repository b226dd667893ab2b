"""`east-train --report-to tensorboard wandb mlflow`: the run's records, as log.jsonl holds them, sent to
experiment trackers too. Each back-end is an optional extra, imported only when chosen; one that is missing is an
`error:` line with its install command before any work.

Reporting takes the records train.py writes to log.jsonl (east_cache.train.runtime.jsonl_writer) and hands each
back-end: at the `run` header its whole recipe (tools/run_recipe.py: every flag, the cache's build options and
fingerprint, the code version); at each `step` record (every --log-every steps: no extra host sync) the loss and
its parts, the learning rate, samples/s and the share of time waiting for data; at each `epoch` record the
validation loss and detection metrics; and pictures (report.pictures): the first training batch's crops with their
targets, and with --val-data the worst validation images with their misses at each evaluation.

Only rank 0 reports. The back-ends' run ids are kept in OUT/report.json, so that --resume (from a checkpoint of
that folder) continues the same runs: TensorBoard drops the stopped run's events past the checkpoint's step, wandb
and MLflow append to the run of that id. A report.json that is not what a run wrote (a run id of another type, an
id that is no plain name) is refused, naming the file.

Every wait ends: each back-end is reached (`connect`: MLflow's store asked for the experiment, the resumed run's
existence checked) before the caches open, and every tracker call at start-up must answer within STARTUP_S seconds
(MLflow's HTTP requests are also given its own timeout and no retries, unless its variables say otherwise; wandb its
init_timeout); an unreachable or refusing tracker is one `error:` line naming it, before any slow work.
"""
from __future__ import annotations

import importlib.util
import json
import re
import threading
from pathlib import Path

from east_cache.atomic import write_atomic
from east_cache.bounds import TRACKER_STARTUP_S as STARTUP_S
from east_cache.errors import UsageError
from east_cache.tools.run_recipe import epoch_metrics, full_recipe, step_metrics

NONE = "none"
# back-end -> (the modules it needs, the extra that installs them); MLflow's local default store is SQLite, through
# SQLAlchemy and Alembic, which its skinny client leaves out
BACKENDS = {"tensorboard": (("tensorboard",), "tensorboard"), "wandb": (("wandb",), "wandb"),
            "mlflow": (("mlflow", "sqlalchemy", "alembic"), "mlflow")}
REPORT_TO = (*BACKENDS, NONE)   # --report-to's choices
IDS_FILE = "report.json"        # in OUT: each back-end's run id, for --resume
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")   # what a stored run id may be: a plain name, never a path


def chosen(names) -> tuple[str, ...]:
    """--report-to's names in order, once each, without `none`; `none` beside a back-end is refused."""
    names = tuple(dict.fromkeys(names or ()))
    if NONE in names and len(names) > 1:
        raise UsageError(f"--report-to {' '.join(names)}: `none` reports nowhere; pass it alone, or only the "
                         f"back-ends to report to")
    return tuple(n for n in names if n != NONE)


def check_report_flags(args) -> None:
    """east-train's --report-to, before any work: `none` alone, with a training run only, its packages there."""
    names = chosen(args.report_to)
    if names and (args.eval_only or args.export_onnx):
        raise UsageError("--report-to reports a training run; --eval-only (its figures go to eval.jsonl, which "
                         "`east-cache runs` reads) and --export-onnx report nowhere: leave --report-to out")
    check_installed(names)


def check_installed(names) -> None:
    """One UsageError naming every chosen back-end whose package is missing, with the command that installs it."""
    absent = {n: [m for m in BACKENDS[n][0] if importlib.util.find_spec(m) is None] for n in names}
    missing = [n for n in names if absent[n]]
    if missing:
        extras = ",".join(BACKENDS[n][1] for n in missing)
        modules = [m for n in missing for m in absent[n]]
        raise UsageError(f"--report-to {' '.join(missing)}: {' and '.join(modules)} "
                         f"{'is' if len(modules) == 1 else 'are'} not installed; pip install -e \".[{extras}]\" "
                         f"(or leave --report-to out)")


def backend(name: str, out: Path):
    """A back-end object (the package imported now): start, scalars, image, finish, where."""
    if name == "tensorboard":
        from east_cache.train.report.tensorboard_log import TensorBoard
        return TensorBoard(out)
    if name == "wandb":
        from east_cache.train.report.wandb_log import Wandb
        return Wandb(out)
    from east_cache.train.report.mlflow_log import MLflow
    return MLflow(out)


class Reporting:
    """The chosen back-ends of one run (rank 0). record() takes log.jsonl's records; image() a picture."""

    def __init__(self, names, out: Path, run_name: str | None, resume_from: Path | None, resume_step: int = 0,
                 say=print):
        """run_name: --run-name; None: the resumed run's name, else out's folder name. say: where the lines saying
        where each back-end writes go, once they started. resume_step: the step a resumed run goes on from (set_step
        sets it once the checkpoint is read). Each tracker is reached here (connect), within STARTUP_S."""
        self.out, self.step, self.say = out, resume_step, say
        self.ids = read_ids(resume_from.parent / IDS_FILE) if resume_from is not None else {}
        self.run_name = run_name or self.ids.get("run_name") or out.resolve().name
        self.resume_step = resume_step if resume_from is not None else None
        self.backends = {n: backend(n, out) for n in names}
        self.started = False
        for name, b in self.backends.items():   # each tracker reached now, before any slow work
            bounded(name, b.connect, self.run_name, self.ids.get(name), self.resume_step)

    def set_step(self, step: int) -> None:
        """The step the run starts at (a resumed run's, once its checkpoint is read)."""
        self.step = step
        if self.resume_step is not None:
            self.resume_step = step

    def record(self, record: dict) -> None:
        event = record.get("event")
        if event == "run":
            self.start(record)
        elif event == "step":
            self.step = record["step"]
            self.scalars(step_metrics(record), record["step"])
        elif event == "epoch":
            self.step = record["step"]
            self.scalars(epoch_metrics(record), record["step"])

    def start(self, header: dict) -> None:
        recipe = full_recipe(header)
        ids = {"run_name": self.run_name}
        for name, b in self.backends.items():
            ids[name] = bounded(name, b.start, self.run_name, recipe, self.ids.get(name), self.resume_step)
        self.ids, self.started = ids, True
        write_atomic(self.out / IDS_FILE, json.dumps(ids, indent=1) + "\n")
        for line in self.where():
            self.say(line)

    def scalars(self, values: dict, step: int) -> None:
        for b in self.backends.values():
            b.scalars(values, step)

    def image(self, tag: str, image, caption: str, step: int | None = None) -> None:
        """image: (H, W, 3) uint8 RGB, at step (default: the last step recorded)."""
        for b in self.backends.values():
            b.image(tag, image, caption, self.step if step is None else step)

    def worst_pages(self):
        """A collector for validate.full_page_metrics of the images show_worst draws."""
        from east_cache.train.report.pictures import WorstPages
        return WorstPages()

    def show_worst(self, worst, step: int) -> None:
        """The worst validation images of an evaluation, with their misses: val/worst_1 the worst."""
        for k, (caption, picture) in enumerate(worst.pictures()):
            self.image(f"val/worst_{k + 1}", picture, caption, step)

    def show_batch(self, batch, step: int) -> None:
        """A training batch's crops with their targets, once: train/first_batch."""
        from east_cache.train.report.pictures import batch_caption, batch_picture
        self.image("train/first_batch", batch_picture(batch.image, batch.score, batch.roi),
                   batch_caption(len(batch.image), step), step)

    def where(self) -> list[str]:
        """A line per back-end: where its run is and how to look at it."""
        return [f"{name}: {b.where()}" for name, b in self.backends.items()]

    def finish(self, status: int) -> None:
        """Each started back-end's run ends with the command's exit status: 0 done, 130 (INTERRUPTED) stopped by a
        signal, anything else failed."""
        for b in self.backends.values():
            if self.started:
                b.finish(status)


def bounded(name: str, call, *args):
    """call(*args), a tracker's start-up call, within STARTUP_S seconds; a failure or a wait past it is one UsageError
    naming the back-end and what to do (the call's thread is left to end by itself)."""
    done: list = []
    if getattr(getattr(call, "__self__", None), "own_timeout", False):   # the library bounds its own wait
        try:
            return call(*args)
        except (UsageError, KeyboardInterrupt):
            raise
        except Exception as e:   # noqa: BLE001 - the tracker's own failure, named
            done.append((False, e))

    def attempt() -> None:
        try:
            done.append((True, call(*args)))
        except BaseException as e:   # noqa: BLE001 - the tracker's own failure, named below
            done.append((False, e))
    if not done:
        thread = threading.Thread(target=attempt, name=f"report-{name}", daemon=True)
        thread.start()
        thread.join(STARTUP_S)
    if not done:
        raise UsageError(f"--report-to {name}: the tracker did not answer within {STARTUP_S:g} s "
                         f"({backend_where(name)}); check that it is reachable, or leave --report-to {name} out")
    ok, value = done[0]
    if ok:
        return value
    if isinstance(value, (UsageError, KeyboardInterrupt)):
        raise value
    text = " ".join(str(value).split())
    head = text.split(". ")[0][:300]
    raise UsageError(f"--report-to {name}: {type(value).__name__}: {head} ({backend_where(name)}); fix the tracker's "
                     f"settings, or leave --report-to {name} out") from None


def backend_where(name: str) -> str:
    """Where a back-end's settings point, as an error names it."""
    import os
    if name == "mlflow":
        return f"MLFLOW_TRACKING_URI={os.environ.get('MLFLOW_TRACKING_URI', '(unset: ./mlflow.db)')}"
    if name == "wandb":
        return f"WANDB_MODE={os.environ.get('WANDB_MODE', '(unset)')}"
    return "the run folder"


def read_ids(path: Path) -> dict:
    """The run ids a previous run of the folder stored ({} when there are none). A file that is not what a run wrote
    (not an object; a back-end's entry not an object; an id not a plain name) is a UsageError naming it."""
    try:
        ids = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a report.json a run wrote ({type(e).__name__}); delete it to start new "
                         f"tracker runs, or restore it") from None
    wrong = ids_problem(ids)
    if wrong:
        raise UsageError(f"{path}: {wrong}; delete it to start new tracker runs, or restore the file the run wrote")
    return ids


def ids_problem(ids) -> str | None:
    """What makes a report.json's content other than what Reporting.start writes, or None."""
    if not isinstance(ids, dict):
        return "not a JSON object"
    if not isinstance(ids.get("run_name", ""), str):
        return "run_name is not a text"
    keys = {"tensorboard": ("logdir",), "wandb": ("id", "project"), "mlflow": ("run_id",)}
    for name, fields in keys.items():
        entry = ids.get(name)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            return f"{name}'s entry is not an object"
        for k in fields:
            if k in entry and not isinstance(entry[k], str):
                return f"{name}.{k} is not a text"
        run_id = entry.get("id" if name == "wandb" else "run_id")
        if run_id is not None and not RUN_ID.fullmatch(run_id):
            return f"{name}'s run id {run_id[:40]!r} is not a plain name (letters, digits, - and _)"
    return None


def records_to(write, report: Reporting | None):
    """A log record writer that also hands each record to the back-ends (write alone without them)."""
    if report is None:
        return write

    def both(record: dict) -> None:
        write(record)
        report.record(record)
    return both


def connect_reporting(cfg, rt) -> Reporting | None:
    """The --report-to back-ends of a run (cfg: its TrainConfig) on rank 0 (rt: its Runtime), each tracker reached
    before the caches open (Reporting); None without --report-to or on another rank."""
    if not cfg.report_to or rt.rank != 0:
        return None
    return Reporting(cfg.report_to, cfg.out, cfg.run_name, cfg.resume, 0, rt.say)


def start_reporting(report: Reporting | None, ctx) -> Reporting | None:
    """The back-ends (connect_reporting's) attached to the run (ctx: its engine Context): started at its header
    record, they are ctx.report, and its first batch is pictured. A resumed run continues the runs its checkpoint's
    folder reported to, from the checkpoint's step."""
    if report is None:
        return None
    report.set_step(ctx.state.step)
    ctx.report = report
    ctx.first_batch = lambda batch: report.show_batch(batch, ctx.state.step)
    return report
