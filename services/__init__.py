"""The services: everything the api and the control plane share (rooms by domain), and
what node code may use of them. Never imports FastAPI, Celery, `api`, `workers` or `cli`.

The core, which imports no room:

    settings.py    every process's settings, from `COHORT_*` environment variables
    health_settings.py  their part on stragglers and quarantined nodes
    replica_pool_settings.py  their part on agents' warm replica processes
    telemetry_settings.py  their part on replicas' per-step points
    setting_lists.py  a list setting read from the environment ("a,b" or JSON)
    startup_objects.py  a service's startup objects kept out of the collector's full runs
    db.py          the engine, sessions and the transaction scope
    models/        the ORM tables
    statuses.py    job and replica statuses and the one table of allowed changes
    exceptions.py  domain errors (api/errors.py maps them to HTTP answers)
    exit_codes.py  what a replica's exit code means for a restart
    data_dir.py    DATA_DIR's modes: what a replica on the same host may reach
    field_suggestions.py  the declared field an unknown one was meant to be ("did you mean")
    auth/          token scopes, tokens issued, expired and revoked, dashboard sessions

The rooms, higher ones importing lower ones only (pyproject.toml's import contracts):

    scheduling/    the scheduler's pass: the cluster, sweeps and retraining in one order
    tracking/      the MLflow export: each tracked job an MLflow run, from the leader
    retraining/    schedules, cron, exactly-once firing, promotion
    registry/      the model registry: models, versions with lineage, aliases and moves
    telemetry/     metric points and log lines stored once, live feeds, job views
    sweeps/        sweeps: search spaces, trials in turn, early stopping (Optuna)
    cluster/       nodes, the queue placed, gang placement, gangs settled, the watchdog
    jobs/          the job spec and its schemas, store, transitions, quotas, bundles, data
    webhooks/      webhooks: the outbox, SSRF checks, signed deliveries sent by the leader
    storage/       the artifact store (node-safe: no SQL)
    wire/          every contract that crosses a process, and every Redis key
"""
