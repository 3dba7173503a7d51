"""Experiment tracking: every job of a tracked project becomes an MLflow run, written from
the control plane (the scheduler's leader), never from replicas.

schemas.py    a project's MLflow settings as the admin API reads and sets them
targets.py    where each project's jobs go (its own setting or the cluster's), and which jobs
run_fields.py what a run says: params, tags, metric keys, its end (pure)
exports.py    the export's SQL: open runs, points after a cursor, steps and failures recorded
client.py     MLflow's client, imported only here and only when an export runs
exporter.py   one round: new jobs found, each open run brought up to date, retried when down

Nothing here is imported by the api but schemas.py and targets.py, which need no MLflow.
"""
