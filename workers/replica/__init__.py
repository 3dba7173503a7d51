"""Replica-side code (the user's process; never SQL, never the api).

    runner.py     `python -m workers.replica.runner`: one training replica
    callbacks.py  the tf_keras callback that feeds the replica's metrics
    resources.py  CPU, memory and GPU figures of the replica
    distribution.py  the job's distribution options: CPU split, mixed precision,
                  shard policy, devices, gradient accumulation
    profiling.py  a TensorBoard profile of the job's `profile:` steps
    report_channel.py `ReplicaReporter`: metrics and progress appended to the metrics file
    roles.py      what a parameter_server worker, ps or evaluator does besides training
    devices_check.py a replica given GPUs trains on them, or fails at once saying why
    parent_watch.py the replica ends when the agent that started it dies
    pool_entry.py a warm replica process, waiting for its job (workers/node/pool.py)
    trainers/     the built-in trainers

Metric points leave through the replica's metrics file (report_channel.py), never Redis:
its agent reads the file and ships them (workers/node/scalars.py).
"""
