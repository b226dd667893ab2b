"""--report-to tensorboard: event files in the run's own folder (OUT/events.out.tfevents.*), so that
`tensorboard --logdir runs` lists each run folder by its name. The recipe is a text table (tag `recipe`; exact, as
JSON: `recipe_json`) and the HParams dashboard's record (every option beside val/hmean and val/loss), so runs compare by option there too."""
from __future__ import annotations

import json
import math
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from east_cache.tools.run_recipe import shown

HPARAM_METRICS = ("val/hmean", "val/loss", "train/loss")   # the HParams dashboard's columns


class TensorBoard:
    def __init__(self, out: Path):
        self.out, self.writer = out, None

    def connect(self, run_name: str, previous: dict | None, resume_step: int | None) -> None:
        """Nothing to reach: event files are written in the run folder."""

    def start(self, run_name: str, recipe: dict, previous: dict | None, resume_step: int | None) -> dict:
        """A resumed run writes on in the same folder; events the stopped run logged past the checkpoint's step
        are dropped (purge_step: those after the checkpoint's step), so the curves continue from the checkpoint."""
        self.writer = SummaryWriter(str(self.out), purge_step=None if resume_step is None else resume_step + 1)
        step = resume_step or 0
        rows = "\n".join(f"| {k} | {' '.join(shown(v).split())} |" for k, v in recipe.items())   # one line each
        self.writer.add_text("recipe", f"run **{run_name}**\n\n| option | value |\n|---|---|\n{rows}", step)
        self.writer.add_text("recipe_json", f"```\n{json.dumps(recipe, indent=1)}\n```", step)   # exact
        values = {k: v if isinstance(v, (bool, int, float, str)) else shown(v) for k, v in recipe.items()}
        for summary in hparams(values, {m: math.nan for m in HPARAM_METRICS}):
            self.writer.file_writer.add_summary(summary, step)
        return {"logdir": str(self.out)}

    def scalars(self, values: dict, step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def image(self, tag: str, image, caption: str, step: int) -> None:
        self.writer.add_image(tag, image, step, dataformats="HWC")
        self.writer.add_text(f"{tag}/caption", caption, step)
        self.writer.flush()

    def where(self) -> str:
        return f"event files in {self.out}; tensorboard --logdir {self.out.parent}"

    def finish(self, status: int) -> None:
        self.writer.close()
