"""Replica-side code (the user's process; never SQL, never the api).

    runner.py     `python -m workers.replica.runner`: one training replica
    callbacks.py  the tf_keras callback that feeds the replica's metrics
    resources.py  CPU, memory and GPU figures of the replica
    trainers/     the built-in trainers

Metric points leave through workers/reporter.py, shared with the node's sidecars.
"""
