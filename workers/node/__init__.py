"""Node-side code: the agent and what it does for each replica (never SQL).

agent.py          the agent: starts and stops replicas, reports starts and exits
agent_process.py  the agent's process: its one Agent and the Celery worker feeding it
loop_wake.py      a signal wakes the worker's loop at once (no polling for it)
claims.py         a replica's claim: fencing of stale and duplicate starts, after a wipe too
supervision.py    a replica's process from its end to its reported exit, or its respawn
heartbeat.py      the node's heartbeat, and its lease: replicas stopped when it lapses
tasks.py          the Celery tasks it consumes from its own queue
checkpoint_now.py "checkpoint now": SIGUSR1 to a replica of a gang being drained
self_drain.py     SIGTERM to the agent: the node drained, its replicas checkpointed, then exit
respawn.py        a lost parameter_server worker started again in place
exits.py          exit codes, and exits/refusals reported until the scheduler has them
admission.py      what it agrees to run (the api's policy, checked again)
inbox.py          what it accepts off its queue: messages sealed for this node, lately
lease.py          its lease: replicas stopped when Redis stops taking its beats
isolation.py      who a replica runs as, and who owns each of its job's files
pool.py           warm replica processes, each handed one replica
pool_size.py      how many warm processes: N, or one per free slot within a memory bound
containers.py     an image job's replica as a container: its engine's argv, stop, leftovers
ports.py, gpus.py the host's ports and GPUs
prepare.py        a replica's code and inputs fetched, its environment built, before it starts
envs.py           job environments: a virtualenv per requirements, cached, LRU-evicted
envs_build.py     one environment's build: pip as the build uid, sealed, renamed into place
bundle_cache.py   code bundles fetched and verified once per digest
code_unpack.py    the child that unpacks one into a replica's code dir as the job's uid
environment.py    a replica's directories and variables; its command resolved
launcher.py       spawning one replica process (never through a shell)
guard.py          the wrapper that ends a job's process with the agent
processes.py      stopping a process and all it started
leftovers.py      what a job's code or a previous agent left running here
data_dir_lock.py  one agent per node id and DATA_DIR
logship.py        a replica's log shipped line by line through Redis
log_text.py       a log line as a terminal shows it (a progress bar's last state)
replay.py         what a sender keeps to send again after Redis lost its data
sidecar.py        what runs beside each replica, whatever its loop:
checkpoint_mirror.py  a job's checkpoints to and from the store, never half of one
checkpoint_syncer.py  the thread that keeps a running replica's checkpoints mirrored
checkpoint_names.py   a checkpoint directory's state files, data and scratch, by name
board_syncer.py     the thread that copies a running replica's TensorBoard files to the store
attempts.py         a job's current attempt: no stale start, no stale checkpoint
replica_files.py    metrics and progress read from the files the loop writes,
tfevents.py         from TensorBoard event files
report_shipper.py   and from the replica's metrics file; its points shipped to Redis
scalars.py          one replica followed: its points shipped, its progress beaten
shipments.py        every replica's points and beats of the node in one MULTI/EXEC a second
"""
