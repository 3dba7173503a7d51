"""Jobs: what a job is and what belongs to it. SQL-side: imported by the api and the
control plane only (node code reaches none of it but `trainers`).

    spec.py         the job spec: the fields a user gives, declared once; their stored form
    spec_parts.py   the spec's nested blocks: hyperparameters, roles, role placement, profile
    schemas.py      the views derived from the spec (JobCreate, JobRead) and the REST/CLI I/O
                    schemas of replicas, events, metrics, logs, nodes
    file_schemas.py the I/O schemas of bundles, data and artifacts
    strategies.py   which options (roles, distribution, profile) fit which strategy
    store.py        create (idempotently), read, list with cursor pagination, cancel
    admission.py    a submission's outcome, its job row, its inserts, an Idempotency-Key's replay
    replica_specs.py the replica spec a stored job gives each replica (its start message)
    submission_batcher.py grouped commits: many requests' submissions in one transaction
    hyperparameters.py bounds on a job's hyperparameters (size, keys, depth, run length)
    stream_marks.py where a job's stream stands: its newest point, line and status change
    bulk_rows.py    many rows of a table in one INSERT (a pass's placed replicas, events)
    transitions.py  transition_job(), the only writer of Job.status
    trainers.py     which trainers a job may name (built-ins, allow-listed entrypoints)
    queue.py        a queued job's place in the placer's order (within its project)
    quotas.py       projects' quotas: the limits in force, usage, every admission check
    quota_schemas.py the I/O schemas of a project's quota
    bundles.py      code bundles: which project uploaded which digest
    data.py         a project's data in the store: upload, list, delete, path checks
    data_versions.py what data holds, as digests (triggers, lineage, holdouts)
    inputs.py       a job's `inputs`: checked at submit, resolved into the replica spec
    uploads.py      request bodies on their way into the store (spooled, hashed, bounded)
    artifacts.py    a job's artifacts: listed with their sha256, resolved for download
"""
