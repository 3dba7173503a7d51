"""Replica-side code (the user's process; never SQL, never the api).

    runner.py     `python -m workers.replica.runner`: one training replica
    callbacks.py  the tf_keras callback that feeds the replica's metrics
    resources.py  CPU, memory and GPU figures of the replica
    distribution.py  the job's distribution options: CPU split, mixed precision,
                  shard policy, devices, gradient accumulation
    profiling.py  a TensorBoard profile of the job's `profile:` steps
    trainers/     the built-in trainers

Metric points leave through workers/reporter.py, shared with the node's sidecars.
"""
