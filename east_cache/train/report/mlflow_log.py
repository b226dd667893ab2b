"""--report-to mlflow: an MLflow run in the store MLflow's own settings name: MLFLOW_TRACKING_URI when set, else
its local default (mlflow.db and the mlruns/ artifact folder in the working folder, which `mlflow ui` started
there shows); MLFLOW_EXPERIMENT_NAME names the experiment (default: east-train). The recipe is the run's params
(and recipe.json), the pictures its artifacts (pictures/TAG/step_S.png)."""
from __future__ import annotations

import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from east_cache.errors import EXIT_INTERRUPTED
from east_cache.tools.run_recipe import shown

EXPERIMENT = "east-train"
PARAM_CHARS = 6000   # MLflow's longest param value
BATCH = 100          # params per log_batch call (MLflow's limit)


class MLflow:
    def __init__(self, out: Path):
        self.out, self.client, self.run_id = out, None, None

    def start(self, run_name: str, recipe: dict, previous: dict | None, resume_step: int | None) -> dict:
        """A new run, or with --resume the stored run, status RUNNING again. Params are set once (MLflow refuses
        a new value for one): a resume adds the options the run did not have, and its whole recipe as an artifact."""
        self.client = MlflowClient()
        old = (previous or {}).get("run_id") if resume_step is not None else None
        if old and self.exists(old):
            self.run_id = old
            self.client.update_run(old, status="RUNNING")
            have = self.client.get_run(old).data.params
            self.client.log_dict(old, recipe, f"recipe_resumed_at_step_{resume_step}.json")
        else:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
            found = self.client.get_experiment_by_name(name)
            experiment = found.experiment_id if found else self.client.create_experiment(name)
            self.run_id, have = self.client.create_run(experiment, run_name=run_name).info.run_id, {}
            self.client.log_dict(self.run_id, recipe, "recipe.json")
        params = [Param(k, shown(v)[:PARAM_CHARS]) for k, v in recipe.items() if k not in have]
        for i in range(0, len(params), BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + BATCH])
        return {"run_id": self.run_id, "tracking_uri": self.client.tracking_uri}

    def exists(self, run_id: str) -> bool:
        try:
            self.client.get_run(run_id)
        except MlflowException:
            return False
        return True

    def scalars(self, values: dict, step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def image(self, tag: str, image, caption: str, step: int) -> None:
        self.client.log_image(self.run_id, image, f"pictures/{tag}/step_{step:07d}.png")
        self.client.log_text(self.run_id, caption, f"pictures/{tag}/step_{step:07d}.txt")

    def where(self) -> str:
        uri = self.client.tracking_uri
        return f"run {self.run_id} in {uri}; mlflow ui --backend-store-uri {uri}"

    def finish(self, status: int) -> None:
        """FINISHED, KILLED (a signal stopped the run: EXIT_INTERRUPTED) or FAILED."""
        state = "FINISHED" if status == 0 else "KILLED" if status == EXIT_INTERRUPTED else "FAILED"
        self.client.set_terminated(self.run_id, state)
