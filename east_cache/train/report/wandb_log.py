"""--report-to wandb: a Weights & Biases run in OUT/wandb. Offline (nothing sent; `wandb sync` uploads it later)
unless wandb's own settings say otherwise: WANDB_MODE when set decides, else a key (WANDB_API_KEY, or the
~/.netrc entry that `wandb login` writes for WANDB_BASE_URL's host) means online. WANDB_PROJECT names the
project (default: east-train), WANDB_ENTITY the team. The recipe is the run's config."""
from __future__ import annotations

import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

import wandb

from east_cache.bounds import TRACKER_STARTUP_S

PROJECT = "east-train"
WANDB_HOST = "https://api.wandb.ai"


def logged_in() -> bool:
    """Whether wandb has a key without asking: WANDB_API_KEY, or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", WANDB_HOST)).hostname or ""
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class Wandb:
    own_timeout = True   # wandb.init bounds its own wait (init_timeout): called in the caller's thread

    def __init__(self, out: Path):
        self.out, self.run = out, None

    def connect(self, run_name: str, previous: dict | None, resume_step: int | None) -> None:
        """Nothing to reach before the run starts: an online wandb.init waits at most TRACKER_STARTUP_S."""

    def start(self, run_name: str, recipe: dict, previous: dict | None, resume_step: int | None) -> dict:
        """A new run, or with --resume the run of the stored id (resume="allow")."""
        mode = None if "WANDB_MODE" in os.environ or logged_in() else "offline"
        run_id = (previous or {}).get("id") if resume_step is not None else None
        settings = wandb.Settings(console="off", x_disable_stats=True, save_code=False, quiet=True,
                                  init_timeout=TRACKER_STARTUP_S)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT), name=run_name, dir=str(self.out),
                              config=recipe, id=run_id, resume="allow" if run_id else None, mode=mode,
                              settings=settings)
        if run_id:
            self.run.config.update(recipe, allow_val_change=True)   # a resume may change --epochs, --max-steps
        return {"id": self.run.id, "project": self.run.project, "dir": self.run.dir, "offline": mode == "offline"}

    def scalars(self, values: dict, step: int) -> None:
        self.run.log(values, step=step)

    def image(self, tag: str, image, caption: str, step: int) -> None:
        self.run.log({tag: wandb.Image(image, caption=caption)}, step=step)

    def where(self) -> str:
        if self.run.settings.mode == "disabled":
            return "disabled by WANDB_MODE: nothing recorded"
        if self.run.settings.mode == "offline":
            return f"offline run {self.run.id} in {Path(self.run.dir).parent}; wandb sync {Path(self.run.dir).parent}"
        return f"run {self.run.id}: {self.run.url}"

    def finish(self, status: int) -> None:
        self.run.finish(exit_code=status)
