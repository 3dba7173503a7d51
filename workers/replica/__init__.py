"""Replica-side code (the user's process; never SQL, never the api).

    runner.py     `python -m workers.replica.runner`: one training replica
    termination.py how the replica answers SIGTERM (143), SIGUSR1 and SIGINT, and once done
    signal_flags.py the flags those signals' handlers set (no lock: a handler may re-enter)
    strategies.py the tf.distribute strategy the replica builds for its job
    callbacks.py  the tf_keras callback that feeds the replica's metrics
    backups.py    step-level backups, exact resume and "checkpoint now" (SIGUSR1, exit 75)
    resources.py  CPU, memory and GPU figures of the replica
    busy_time.py  the replica's busy seconds per step (its own work, without waiting for its gang)
    distribution.py  the job's distribution options: CPU split, mixed precision,
                  shard policy, devices, gradient accumulation
    profiling.py  a TensorBoard profile of the job's `profile:` steps
    report_writer.py `ReplicaReporter`: the replica's metric points and progress
                  beats written as lines of its metrics file
    evaluation_job.py an evaluation job: the trainer's evaluate(ctx) on a saved model
    roles.py      what a parameter_server worker, ps or evaluator does besides training
    devices_check.py a replica given GPUs trains on them, or fails at once saying why
    parent_watch.py the replica ends when the agent that started it dies
    pool_entry.py a warm replica process, waiting for its job (workers/node/pool.py)
    warm_program.py a job's `python train.py` run by a warm process as `__main__`
    trainers/     the built-in trainers

Metric points leave the replica as lines of its metrics file, written by report_writer.py
(its buffer is workers/point_buffer.py's, which dials nothing), never through Redis: the
replica holds no Redis credentials and imports no node code. Its agent reads the file and
ships the points (workers/node/report_shipper.py, the node's side).
"""
