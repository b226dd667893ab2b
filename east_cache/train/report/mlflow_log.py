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
# MLflow's HTTP settings where the environment leaves them unset: a request waits at most 10 s and is tried at most
# 3 times, 1 s then 2 s apart (MLflow's own defaults, 120 s and 7 tries with growing pauses, wait minutes for a
# server that is not there)
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


class MLflow:
    def __init__(self, out: Path):
        self.out, self.client, self.run_id = out, None, None
        self.resumed, self.experiment = None, None

    def connect(self, run_name: str, previous: dict | None, resume_step: int | None) -> None:
        """The store reached before any slow work: with --resume the stored run looked up, else the experiment
        found or made (MLFLOW_EXPERIMENT_NAME, default east-train)."""
        for k, v in HTTP_DEFAULTS.items():
            os.environ.setdefault(k, v)
        self.client = MlflowClient()
        old = (previous or {}).get("run_id") if resume_step is not None else None
        self.resumed = old if old and self.exists(old) else None
        if self.resumed is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
            found = self.client.get_experiment_by_name(name)
            self.experiment = found.experiment_id if found else self.client.create_experiment(name)

    def start(self, run_name: str, recipe: dict, previous: dict | None, resume_step: int | None) -> dict:
        """A new run, or with --resume the stored run, status RUNNING again. Params are set once (MLflow refuses
        a new value for one): a resume adds the options the run did not have, and its whole recipe as an artifact."""
        if self.resumed:
            self.run_id = self.resumed
            self.client.update_run(self.run_id, status="RUNNING")
            have = self.client.get_run(self.run_id).data.params
            self.client.log_dict(self.run_id, recipe, f"recipe_resumed_at_step_{resume_step}.json")
        else:
            self.run_id, have = self.client.create_run(self.experiment, run_name=run_name).info.run_id, {}
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
