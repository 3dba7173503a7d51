"""The Keras metrics callback with a real tf_keras `fit`: every step's points reach the
metrics file once and in order, Keras hands it the logs without converting them per
batch, training's end flushes and beats ahead; the ParameterServerStrategy chief's
variant reports every step of its RemoteValues, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cohort.metrics import decode_line
from workers.node.report_shipper import MetricsFileReader
from workers.replica.callbacks import (
    COORDINATED_STEPS_IN_FLIGHT,
    FINISH_GRACE,
    metrics_callback,
)
from workers.replica.report_writer import ReplicaReporter

EPOCHS, STEPS, BATCH = 3, 20, 8


def tiny_fit(callbacks: list[Any]) -> Any:
    import tensorflow as tf
    import tf_keras as keras

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).random((64, 4), dtype=np.float32)
    y = (x.sum(axis=1) > 2).astype(np.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(2)])
    model.compile(
        optimizer="sgd",
        metrics=["accuracy"],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)


def test_fit_reports_every_step_once_in_order_without_per_batch_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tf_keras.src import callbacks as keras_callbacks

    conversions = []
    convert = keras_callbacks.tf_utils.sync_to_numpy_or_python_type

    def counting(logs: Any) -> Any:
        conversions.append(logs)
        return convert(logs)

    monkeypatch.setattr(keras_callbacks.tf_utils, "sync_to_numpy_or_python_type", counting)
    path = tmp_path / "metrics.jsonl"
    # The sender would write every hour: what is in the file when fit returns,
    # on_train_end flushed.
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    history = tiny_fit([metrics_callback(reporter, BATCH)])
    points = MetricsFileReader(path).read(final=True)
    beats = [decode_line(raw).beat for raw in path.read_bytes().splitlines()]
    reporter.close()

    assert len(conversions) < STEPS, "Keras converted the logs at every batch"
    step_points = [(p.step, p.epoch, p.name) for p in points if not p.name.startswith("epoch_")]
    assert step_points == [
        (epoch * STEPS + batch + 1, epoch, name)
        for epoch in range(EPOCHS)
        for batch in range(STEPS)
        for name in ("loss", "accuracy", "step_time", "examples_per_sec")
    ]
    assert all(p.value > 0 for p in points if p.name == "step_time")
    epoch_loss = [(p.step, p.epoch, p.value) for p in points if p.name == "epoch_loss"]
    assert epoch_loss == [
        ((epoch + 1) * STEPS, epoch, pytest.approx(loss))
        for epoch, loss in enumerate(history.history["loss"])
    ]
    assert [beat for beat in beats if beat is not None], "no beat at the end of training"
    assert max(beat for beat in beats if beat is not None) > points[-1].ts + FINISH_GRACE - 60


class Remote:
    """A ParameterServerStrategy RemoteValue: the figures once fetched."""

    fetched = 0

    def __init__(self, loss: float) -> None:
        self.loss = loss

    def fetch(self) -> dict[str, Any]:
        Remote.fetched += 1
        return {"loss": np.float32(self.loss)}


def test_the_coordinated_callback_reports_every_step_of_its_remote_values(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    callback = metrics_callback(reporter, BATCH, coordinated=True)
    steps = COORDINATED_STEPS_IN_FLIGHT * 3
    callback.set_params({"steps": steps})
    callback.on_train_begin()
    for epoch in range(2):
        callback.on_epoch_begin(epoch)
        for batch in range(steps):
            callback.on_train_batch_end(batch, Remote(float(epoch * steps + batch + 1)))
        # Fetched as steps complete, not all at the epoch's end.
        assert Remote.fetched == (epoch + 1) * steps - COORDINATED_STEPS_IN_FLIGHT
        callback.on_epoch_end(epoch, {"loss": 0.5})
    callback.on_train_end()
    points = MetricsFileReader(path).read(final=True)
    reporter.close()
    losses = [(p.step, p.value) for p in points if p.name == "loss"]
    assert losses == [(step, float(step)) for step in range(1, 2 * steps + 1)]
    assert [p.step for p in points if p.name == "epoch_loss"] == [steps, 2 * steps]
    assert len([p for p in points if p.name == "step_time"]) == 2 * steps


class Gone:
    """A RemoteValue whose figures were on a worker that is gone: fetching raises what
    TensorFlow raises then (or, with `ps`, what it raises when a ps is gone)."""

    def __init__(self, task: str) -> None:
        self.task = task

    def fetch(self) -> dict[str, Any]:
        import tensorflow as tf

        raise tf.errors.UnavailableError(
            None,
            None,
            "failed to connect to all addresses; last error: Connection refused\n"
            f"Additional GRPC error information from remote target /job:{self.task}/replica:0/"
            "task:0/device:CPU:0 while calling /tensorflow.eager.EagerService/Enqueue",
        )


def test_figures_lost_with_their_worker_skip_that_step_and_a_lost_ps_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tensorflow as tf

    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    callback = metrics_callback(reporter, BATCH, coordinated=True)
    steps = COORDINATED_STEPS_IN_FLIGHT + 4
    callback.set_params({"steps": steps})
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    lost = {3, steps}  # one fetched mid-epoch, one at the epoch's end
    for batch in range(steps):
        step = batch + 1
        callback.on_train_batch_end(batch, Gone("worker") if step in lost else Remote(step))
    callback.on_epoch_end(0, {"loss": 0.5})
    callback.on_train_end()
    points = MetricsFileReader(path).read(final=True)
    reporter.close()
    assert [p.step for p in points if p.name == "loss"] == [
        step for step in range(1, steps + 1) if step not in lost
    ]
    said = capsys.readouterr().out
    assert "cohort: step 3's figures were lost with the worker that ran it" in said
    assert f"cohort: step {steps}'s figures were lost" in said

    reporter = ReplicaReporter(
        tmp_path / "ps.jsonl", job_id=7, attempt=1, replica=0, flush_interval=3600
    )
    callback = metrics_callback(reporter, BATCH, coordinated=True)
    callback.set_params({"steps": steps})
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_train_batch_end(0, Gone("ps"))
    with pytest.raises(tf.errors.UnavailableError):
        callback.on_epoch_end(0, {"loss": 0.5})
    reporter.close()


def test_evaluation_batches_beat_at_most_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    callback = metrics_callback(reporter, BATCH)
    for batch in range(1000):
        callback.on_test_batch_end(batch, {"loss": 0.5})
    reporter.close()
    assert len(path.read_bytes().splitlines()) == 1
