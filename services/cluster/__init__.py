"""The cluster: the scheduler's view of nodes and gangs. SQL-side except the pure modules
(placement, placement_pool, placement_roles, fair_share, tf_config,
straggler_runs), which node code may import.

    queue_placement.py the queue placed: gangs stored with their start messages, reasons
    placement_digest.py whether placement's inputs changed since the last idle pass
    fencing.py         fencing tokens: only the newest leader's transactions commit
    pass_lock.py       one pass at a time across scheduler processes (in the database)
    nodes.py           the node registry: heartbeats in, lost nodes out, nodes read for views
    node_capacity.py   free slots, GPUs and ports of the ready nodes, read for placement
    arrivals.py        when the control plane last heard from each node and replica
    placement.py       gang placement: (queue, nodes) -> all-or-nothing assignments
    placement_pool.py  free capacity of one kind (CPU slots or GPUs), bucketed
    placement_roles.py a gang placed by parts: a parameter_server chief with its evaluator
    fair_share.py      the queue's order between projects (fair shares) and running quotas
    gangs.py           replica reports applied to a job's gang, its status settled
    gang_outcome.py    a gang's success or break, and whether and when it restarts
    tf_config.py       each replica's role in its gang, and the TF_CONFIG it is told
    watchdog.py        what broke without telling anyone, for the pass to act on
    running_checks.py  running replicas against their beats and limits: lost exits, hangs
    preparing.py       what a pending replica's agent says it is doing before its start
    drains.py          drained nodes: their gangs asked to checkpoint now, then moved
    hang_reasons.py    how long a replica may be silent, and what its hang is called
    straggler_runs.py  which replica of a gang is a straggler, from busy seconds per step (pure)
    stragglers.py      stragglers found in running gangs' figures and recorded, counted by node
    quarantine.py      nodes whose replicas fail or straggle too often quarantined; a cordon lifted
"""
