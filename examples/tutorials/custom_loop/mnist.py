# The data and the model of TensorFlow's "Custom training loop with Keras and
# MultiWorkerMirroredStrategy" tutorial
# (https://www.tensorflow.org/tutorials/distribute/multi_worker_with_ctl, Apache 2.0;
# ../README.md says what differs). The one change: MNIST is not downloaded: random numpy
# arrays of its shape and types stand in for it (a node may have no network).
import numpy as np
import tensorflow as tf


def mnist_like():
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, size=(60000, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, size=60000, dtype=np.uint8)
    return x_train, y_train


def mnist_dataset():
    x_train, y_train = mnist_like()
    # Pixels as float32 in [0, 1], labels as int64, as the tutorial does.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000)


def dataset_fn(global_batch_size, input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = mnist_dataset()
    # Each input pipeline reads its own shard, batched at the per-replica size.
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.batch(batch_size)


def build_cnn_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
