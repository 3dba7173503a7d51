"""Node-side code (the agent; never SQL): Celery tasks, spawning and supervising replica processes,
ports, GPUs, log shipping."""
