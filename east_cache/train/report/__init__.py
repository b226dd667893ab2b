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
and MLflow append to the run of that id.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from east_cache.atomic import write_atomic
from east_cache.errors import UsageError
from east_cache.tools.run_recipe import epoch_metrics, full_recipe, step_metrics

NONE = "none"
# back-end -> (the modules it needs, the extra that installs them); MLflow's local default store is SQLite, through
# SQLAlchemy and Alembic, which its skinny client leaves out
BACKENDS = {"tensorboard": (("tensorboard",), "tensorboard"), "wandb": (("wandb",), "wandb"),
            "mlflow": (("mlflow", "sqlalchemy", "alembic"), "mlflow")}
REPORT_TO = (*BACKENDS, NONE)   # --report-to's choices
IDS_FILE = "report.json"        # in OUT: each back-end's run id, for --resume


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

    def __init__(self, names, out: Path, run_name: str | None, resume_from: Path | None, resume_step: int,
                 say=print):
        """run_name: --run-name; None: the resumed run's name, else out's folder name. say: where the lines saying
        where each back-end writes go, once they started."""
        self.out, self.step, self.say = out, resume_step, say
        self.ids = read_ids(resume_from.parent / IDS_FILE) if resume_from is not None else {}
        self.run_name = run_name or self.ids.get("run_name") or out.resolve().name
        self.resume_step = resume_step if resume_from is not None else None
        self.backends = {n: backend(n, out) for n in names}
        self.started = False

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
            ids[name] = b.start(self.run_name, recipe, self.ids.get(name), self.resume_step)
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


def read_ids(path: Path) -> dict:
    """The run ids a previous run of the folder stored ({} when there are none, or the file is not ours)."""
    try:
        ids = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return ids if isinstance(ids, dict) else {}


def records_to(write, report: Reporting | None):
    """A log record writer that also hands each record to the back-ends (write alone without them)."""
    if report is None:
        return write

    def both(record: dict) -> None:
        write(record)
        report.record(record)
    return both


def start_reporting(cfg, ctx) -> Reporting:
    """The --report-to back-ends of a run (cfg: its TrainConfig; ctx: its engine Context, on rank 0), started at
    its header record; they are ctx.report, and its first batch is pictured. A resumed run continues the runs its
    checkpoint's folder reported to, from the checkpoint's step."""
    report = Reporting(cfg.report_to, cfg.out, cfg.run_name, cfg.resume, ctx.state.step, ctx.rt.say)
    ctx.report = report
    ctx.first_batch = lambda batch: report.show_batch(batch, ctx.state.step)
    return report
