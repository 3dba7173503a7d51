# TensorFlow's "Multi-worker training with Keras" tutorial as one script: its main.py, then
# its sections on saving the model and on fault tolerance (BackupAndRestore), in order.
# Every path is the tutorial's own; ../README.md lists the lines to change so that Cohort
# keeps the model and the checkpoints and resumes after a crash.
import json
import os

import tensorflow as tf

import mnist_setup

per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # The model is built and compiled inside the strategy's scope.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

# Fault tolerance: the training state is backed up at each epoch's end and restored when
# the cluster starts again after a worker was lost.
callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir="/tmp/backup")]
multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70, callbacks=callbacks)

# Saving: every worker saves (saving runs collectives), the chief to the model path and
# the others to a temporary directory beside it, which they remove afterwards.
model_path = "/tmp/keras-model"


def _is_chief(task_type, task_id):
    # A worker with index 0 is the chief; task_type None: not distributed at all.
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def _get_temp_dir(dirpath, task_id):
    temp_dir = os.path.join(dirpath, "workertemp_" + str(task_id))
    tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


task_type, task_id = (
    strategy.cluster_resolver.task_type,
    strategy.cluster_resolver.task_id,
)
write_model_path = write_filepath(model_path, task_type, task_id)
multi_worker_model.save(write_model_path)
if not _is_chief(task_type, task_id):
    tf.io.gfile.rmtree(os.path.dirname(write_model_path))
