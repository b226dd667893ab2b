"""east-train --report-to: every back-end offline, read back from what it wrote (TensorBoard's event files, wandb's
offline run folder, MLflow's local SQLite store): the metrics at their steps, the recipe (every flag, the cache's
fingerprint and options) as the run's config, the pictures; a resumed run goes on in the same runs. A test of a
back-end whose package is missing is skipped (the dev extra installs them all)."""
from __future__ import annotations

import importlib.util
import io
import json
import struct

import numpy as np
import pytest
from helpers import QUIET_RUN, epochs_of, read_log
from PIL import Image

from east_cache.errors import UsageError
from east_cache.train import report, train
from east_cache.tools.run_recipe import NOT_RECIPE, flatten, recipe_of, shown
from east_cache.reader import CacheDataset

BACKENDS = [name for name, (modules, _) in report.BACKENDS.items() if all(map(importlib.util.find_spec, modules))]
AUGMENT = importlib.util.find_spec("albumentations") is not None   # an --augment recipe, where it can be read


def needs(name: str):
    return pytest.mark.skipif(name not in BACKENDS, reason=f"{name} is not installed (pip install -e \".[{name}]\")")


@pytest.fixture(scope="module")
def reported(tiny_cache, tiny_data, tmp_path_factory):
    """A run of 2 epochs (1 step each) with full-page validation reported to every installed back-end, then
    resumed from its epoch 1 checkpoint to epoch 3: the folder, its log, and the MLflow store's URI."""
    tmp = tmp_path_factory.mktemp("report")
    out, uri = tmp / "run", f"sqlite:///{tmp / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)   # MLflow's artifacts go to ./mlruns
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):   # offline by our rule: no key anywhere
            mp.delenv(var, raising=False)
        mp.setenv("NETRC", str(tmp / "no-netrc"))
        for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
            mp.setenv(var, str(tmp / "wandb-home"))
        flags = [*QUIET_RUN, "--cache", str(tiny_cache), "--out", str(out), "--report-to", *BACKENDS]
        val = ["--val-data", str(tiny_data), "--val-split", "train"]
        augment = []
        if AUGMENT:
            import albumentations as A
            A.save(A.Compose([A.GaussNoise(p=0.5)]), str(tmp / "aug.yaml"), data_format="yaml")
            augment = ["--augment", str(tmp / "aug.yaml")]
        assert train.run([*flags, "--epochs", "2", *val, *augment, "--run-name", "first"]) == 0
        first = json.loads((out / report.IDS_FILE).read_text())
        assert train.run([*flags, "--epochs", "3", *val, "--resume", str(out / "epoch_1.pt")]) == 0
    return out, read_log(out), uri, first


def segments(log: list[dict]) -> list[list[dict]]:
    starts = [i for i, r in enumerate(log) if r["event"] == "run"]
    return [log[s:e] for s, e in zip(starts, [*starts[1:], len(log)])]


def expected(log: list[dict]) -> dict:
    """What the back-ends must hold, from log.jsonl: train/loss and val/hmean by step (the resumed run's where both
    logged a step), the first start's recipe."""
    first, resumed = segments(log)
    loss = {r["step"]: r["loss"] for seg in (first, resumed) for r in seg if r["event"] == "step"}
    hmean = {r["step"]: r["hmean"] for seg in (first, resumed) for r in epochs_of(seg)}
    return {"loss": loss, "hmean": hmean, "recipe": recipe_of(first[0]), "start": first[0]}


def check_recipe(config: dict, want: dict, cache) -> None:
    """Every flag, the cache's options and fingerprint, the --augment recipe's text and the code version, as the
    back-end holds them."""
    assert config["cache.fingerprint"] == CacheDataset(cache).fingerprint
    flags = flatten(want["start"]["config"])
    assert not AUGMENT or "GaussNoise" in want["recipe"]["augment_recipe.text"]
    for key in ("jitter", "lr", "seed", "cache.max_rotation", "cache.height_jitter", "cache.input_size", "code.east",
                *(k for k in flags if k not in NOT_RECIPE), *want["recipe"]):
        assert key in config, key
        got = config[key]   # TensorBoard's table and MLflow's params hold text, wandb's config the values
        assert (got if isinstance(got, str) else shown(got)) == shown(want["recipe"][key]), key


@pytest.mark.slow
def test_the_log_records_the_pace_and_how_the_run_ended(reported):
    out, log, _, _ = reported
    steps = [r for r in log if r["event"] == "step"]
    assert all(r["samples_per_s"] > 0 and 0 <= r["data_wait"] <= 1 for r in steps)
    first, resumed = segments(log)
    assert first[0]["cache_config"]["input_size"] == 64 and first[0]["pid"] > 0
    assert first[-1]["event"] == resumed[-1]["event"] == "end" and resumed[-1]["reason"] == "finished"
    assert [r["epoch"] for r in epochs_of(resumed)] == [2, 3]


@pytest.mark.slow
@needs("tensorboard")
def test_tensorboard_event_files_read_back(reported, tiny_cache):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out, log, _, first = reported
    want = expected(log)
    acc = EventAccumulator(str(out), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    acc.Reload()
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == sorted(want["loss"]), "the first start's step 2 dropped, the resumed run's kept"
    assert [e.value for e in loss] == pytest.approx([want["loss"][e.step] for e in loss])
    assert {e.step: e.value for e in acc.Scalars("val/hmean")} == pytest.approx(want["hmean"])
    assert {e.step for e in acc.Scalars("train/samples_per_s")} == set(want["loss"])
    text = acc.Tensors("recipe_json/text_summary")[0].tensor_proto.string_val[0].decode()
    check_recipe({k: v if isinstance(v, str) else shown(v) for k, v in json.loads(text.strip("`\n")).items()},
                 want, tiny_cache)
    table = acc.Tensors("recipe/text_summary")[0].tensor_proto.string_val[0].decode()
    assert f"| cache.fingerprint | {want['recipe']['cache.fingerprint']} |" in table.splitlines()
    batch = acc.Images("train/first_batch")
    assert [b.step for b in batch] == [0, 1], "each start shows its first batch"
    picture = np.asarray(Image.open(io.BytesIO(batch[0].encoded_image_string)))
    assert picture.shape[2] == 3 and picture.shape[0] >= 64 and picture.std() > 0
    assert [e.step for e in acc.Images("val/worst_1")] == [1, 2, 3]
    assert first["tensorboard"]["logdir"] == str(out)


def wandb_records(path):
    """The protobuf records of a .wandb file: W&B's LevelDB-style log (a 7-byte header, 32 KiB blocks of records,
    each a CRC32, a length, a type: 1 full, 2 first, 3 middle, 4 last), each a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2 as pb
    data, pos, block, part = path.read_bytes(), 7, 32768, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:   # zero padding to the block's end
            pos += left
            continue
        part, pos = part + data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(part)
            part = b""
            yield record


def wandb_run(folder):
    """(config, {key: {step: value}}, [image paths]) of one offline run folder."""
    (path,) = folder.glob("run-*.wandb")
    config, history, images = {}, {}, []
    for r in wandb_records(path):
        kind = r.WhichOneof("record_type")
        items = r.run.config.update if kind == "run" else r.config.update if kind == "config" else []
        config.update({i.key: json.loads(i.value_json) for i in items})
        if kind == "history":
            values = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            for key, value in values.items():
                history.setdefault(key, {})[r.history.step.num] = value
                if key.endswith("/path"):
                    images.append(folder / "files" / value)
    return config, history, images


@pytest.mark.slow
@needs("wandb")
def test_wandb_offline_run_reads_back(reported, tiny_cache):
    out, log, _, first = reported
    want = expected(log)
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, "offline: one folder per start, both of the one run id"
    ids = {p.name.rsplit("-", 1)[1] for p in runs}
    assert ids == {first["wandb"]["id"]} and first["wandb"]["offline"]
    config, history, images = wandb_run(runs[0])
    check_recipe(config, want, tiny_cache)
    first_run = segments(log)[0]
    assert history["train/loss"] == pytest.approx({r["step"]: r["loss"] for r in first_run if r["event"] == "step"})
    assert history["val/hmean"] == pytest.approx({r["step"]: r["hmean"] for r in epochs_of(first_run)})
    assert history["train/first_batch/_type"] == {0: "image-file"}
    assert [p.name.split("_")[0] for p in images if p.parent.name == "train"] == ["first"]
    assert all(p.is_file() and Image.open(p).size[0] >= 64 for p in images)
    assert any(p.parent.name == "val" for p in images), "the worst validation images"
    _, resumed, _ = wandb_run(runs[1])
    assert sorted(resumed["train/loss"]) == [2, 3]


@pytest.mark.slow
@needs("mlflow")
def test_mlflow_local_store_reads_back(reported, tiny_cache):
    from mlflow.tracking import MlflowClient
    out, log, uri, first = reported
    want = expected(log)
    client = MlflowClient(tracking_uri=uri)
    run_id = first["mlflow"]["run_id"]
    assert json.loads((out / report.IDS_FILE).read_text())["mlflow"]["run_id"] == run_id, "resumed: the same run"
    run = client.get_run(run_id)
    assert run.info.run_name == "first" and run.info.status == "FINISHED"
    check_recipe(run.data.params, want, tiny_cache)
    history = client.get_metric_history(run_id, "train/loss")
    assert sorted({m.step for m in history}) == sorted(want["loss"])
    last = {m.step: m.value for m in sorted(history, key=lambda m: m.timestamp)}   # the resumed run's last
    assert last == pytest.approx(want["loss"])
    assert {m.step: m.value for m in client.get_metric_history(run_id, "val/hmean")} == pytest.approx(want["hmean"])
    pictures = client.download_artifacts(run_id, "pictures", str(out.parent / "artifacts"))
    batch = sorted(p.name for p in (out.parent / "artifacts" / "pictures" / "train" / "first_batch").glob("*.png"))
    assert batch == ["step_0000000.png", "step_0000001.png"] and pictures
    assert sorted(p.name for p in (out.parent / "artifacts" / "pictures" / "val" / "worst_1").glob("*.png")) == [
        "step_0000001.png", "step_0000002.png", "step_0000003.png"]


def test_a_missing_backend_is_one_error_line_before_any_work(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    argv = ["--cache", str(tmp_path / "no-cache"), "--out", str(tmp_path / "run"), "--report-to", "tensorboard",
            "wandb"]
    with pytest.raises(UsageError, match=r'--report-to wandb: wandb is not installed; pip install -e "\.\[wandb\]"'):
        train.run(argv)
    assert train.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        'error: --report-to wandb: wandb is not installed; pip install -e ".[wandb]" (or leave --report-to out)']
    assert not (tmp_path / "run").exists()


def test_none_goes_alone(tmp_path):
    with pytest.raises(UsageError, match="`none` reports nowhere"):
        train.run(["--cache", str(tmp_path), "--report-to", "none", "tensorboard"])
    assert report.chosen(["none"]) == ()
    assert report.chosen(["wandb", "tensorboard", "wandb"]) == ("wandb", "tensorboard")


def test_mlflow_needs_its_local_store_too(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "alembic" else real(name, *a))
    with pytest.raises(UsageError, match=r'--report-to mlflow: alembic is not installed; pip install -e "\.\[mlflow'):
        report.check_installed(["mlflow"])


def test_report_to_goes_with_training_only(tmp_path):
    with pytest.raises(UsageError, match="--report-to reports a training run"):
        train.run(["--eval-only", "--checkpoint", str(tmp_path / "x.pt"), "--report-to", "tensorboard"])


@pytest.mark.slow
@needs("mlflow")
def test_an_mlflow_run_ends_as_the_command_did(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from east_cache.train.report.mlflow_log import MLflow
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    for status, state in ((0, "FINISHED"), (130, "KILLED"), (1, "FAILED")):   # done, a signal, an error
        backend = MLflow(tmp_path)
        backend.connect("r", None, None)
        ids = backend.start("r", {"lr": 0.001, "cache.fingerprint": "f" * 32, "val_data": None}, None, None)
        backend.scalars({"train/loss": 2.5}, 7)
        backend.finish(status)
        run = MlflowClient().get_run(ids["run_id"])
        assert run.info.status == state and run.data.params == {"lr": "0.001", "cache.fingerprint": "f" * 32,
                                                                "val_data": "-"}
        history = MlflowClient().get_metric_history(ids["run_id"], "train/loss")
        assert [(m.step, m.value) for m in history] == [(7, 2.5)]


# Every wait ends, and a tracker's failure or a damaged report.json is one `error:` line before the caches open (the
# cache below does not exist: an error about it would mean the caches were opened first).

def tracker_run(tmp_path, capsys, *flags) -> tuple[int, str, float]:
    import time
    t0 = time.perf_counter()
    status = train.main(["--cache", str(tmp_path / "no-cache"), "--out", str(tmp_path / "run"), *QUIET_RUN,
                         "--device", "cpu", *flags])
    return status, capsys.readouterr().err, time.perf_counter() - t0


def one_error(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and "no-cache" not in err, err
    return lines[0]


@pytest.mark.slow
@needs("mlflow")
def test_an_unreachable_mlflow_server_is_one_line_within_seconds(tmp_path, capsys, monkeypatch):
    import socket
    with socket.socket() as s:   # bound, never listening: a connection to it is refused
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{s.getsockname()[1]}")
        for k in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
            monkeypatch.delenv(k, raising=False)
        status, err, took = tracker_run(tmp_path, capsys, "--report-to", "mlflow")
    line = one_error(err)
    assert status == 2 and "--report-to mlflow" in line and "MLFLOW_TRACKING_URI=http://127.0.0.1" in line, line
    assert took < 20, took


@pytest.mark.slow
@needs("mlflow")
def test_an_mlflow_server_that_never_answers_ends_at_the_bound(tmp_path, capsys, monkeypatch):
    import socket
    import threading
    server, held = socket.create_server(("127.0.0.1", 0)), []

    def accept() -> None:   # every connection accepted, never a byte sent
        try:
            while True:
                held.append(server.accept()[0])
        except OSError:
            return
    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")   # the tracker's own timeout would wait: ours ends it
    monkeypatch.setattr(report, "STARTUP_S", 1.0)
    try:
        status, err, took = tracker_run(tmp_path, capsys, "--report-to", "mlflow")
    finally:
        server.close()
        for c in held:
            c.close()
    line = one_error(err)
    assert status == 2 and "did not answer within 1 s" in line and took < 15, (line, took)


@needs("mlflow")
def test_mlflows_file_store_is_one_line_before_the_caches_open(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    status, err, _ = tracker_run(tmp_path, capsys, "--report-to", "mlflow")
    line = one_error(err)
    assert status == 2 and "--report-to mlflow: MlflowException" in line and "file:" in line, line


@pytest.mark.parametrize("ids, wrong", [({"mlflow": "x"}, "mlflow's entry is not an object"),
                                        ({"mlflow": {"run_id": 5}}, "mlflow.run_id is not a text"),
                                        ({"wandb": {"id": "../../x", "project": "p"}}, "is not a plain name"),
                                        ([1, 2], "not a JSON object"), ("{", "not a report.json a run wrote")])
def test_a_damaged_report_json_is_refused_on_resume(tmp_path, capsys, ids, wrong):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "epoch_1.pt").write_bytes(b"a checkpoint")
    (tmp_path / "run" / report.IDS_FILE).write_text(ids if isinstance(ids, str) else json.dumps(ids))
    status, err, _ = tracker_run(tmp_path, capsys, "--report-to", BACKENDS[0], "--resume",
                                 str(tmp_path / "run" / "epoch_1.pt"))
    line = one_error(err)
    assert status == 2 and report.IDS_FILE in line and wrong in line and "delete it" in line, line
