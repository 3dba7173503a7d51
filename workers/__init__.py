"""The processes besides the api: the control plane, node agents and replicas, each in a
room of its own that never imports the others (they talk through Redis).

    control/      the scheduler process (holds SQL): leadership, events, the ingest
    node/         the node agent and what it does for each replica (no SQL)
    replica/      the replica process: runner, callbacks, trainers (no SQL, no Redis)
    celery_app.py the Celery application: per-node queues, short idempotent tasks
    handoff.py    how an agent hands a warm replica process its job
    layout.py     where a job's files go on a node (asked by agent and runner alike)
    point_buffer.py `PointBuffer`: a replica's metric points buffered and sent in
                  batches (the replica's writer and the node's shipper share it)
    private_tmp.py a replica's own /tmp and /dev/shm (a mount namespace), made before
                  it becomes its job's user (cold spawns and warm hand-offs alike)
    process_priority.py a warm process's CPU priority: lowest at first, then raised
                  by its agent (the warm process and the agent set it alike)
    python_args.py which `python ...` commands a warm process runs as a fresh
                  interpreter would (agent and warm process read it alike)
    step_records.py a replica's per-step records and which become points, above a
                  rate (the replica's writer; the agent sets the rate)
"""
