"""Read a CSV from the artifact store and shard it across the gang with tf.data.

The job names its input (`inputs: {digits.csv: data/digits.csv}`); the agent fetches
it from the store into `COHORT_INPUT_DIR` before the replica starts, so the script
reads a local file and needs no store credentials. Each worker reads the whole file;
`AutoShardPolicy.DATA` makes each one train on its own share of every batch.
"""

from __future__ import annotations

import argparse
import os

import tensorflow as tf
import tf_keras as keras


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data", default=os.path.join(os.environ.get("COHORT_INPUT_DIR", "."), "digits.csv")
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    dataset = tf.data.experimental.make_csv_dataset(
        args.data, batch_size=global_batch, label_name="label", num_epochs=1, shuffle=False
    )
    dataset = dataset.map(
        lambda features, label: (tf.stack(list(features.values()), axis=1), label)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options).cache().repeat()

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.layers.Input(shape=(64,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer="adam",
            metrics=["accuracy"],
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    # TensorBoard scalars reach Cohort's charts; a Keras callback writes them too.
    board = keras.callbacks.TensorBoard(
        os.environ.get("COHORT_TENSORBOARD_DIR", "tb"), update_freq=5
    )
    model.fit(
        dataset,
        epochs=args.epochs,
        steps_per_epoch=1797 // global_batch,
        callbacks=[board],
        verbose=2,
    )


if __name__ == "__main__":
    main()
