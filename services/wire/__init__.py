"""What crosses a process boundary: typed contracts with one encoder and one decoder each,
and every Redis key and stream name.

    contract.py  the shared shape: strict pydantic dataclasses, `encode`/`decode`, WireError
    keys.py      Redis keys, streams, hashes and Celery queue names
    client.py    the Redis client factory; publishing events, waking the scheduler
    replica.py   the replica spec, and the messages to node agents (start, stop, clean up)
    events.py    replica started / exited events, wake-ups, node heartbeats
    batches.py   metric and log batches, progress beats (hand-decoded: the hot path)
    feed.py      the rows of a job's live feed (`cohort:live:<job>`), written by the ingest
    policy.py    the checks on a job's argv and environment (the api's and the agent's)
    requirements.py a job's requirement lines: checked, normalised, and their digest
    signing.py   HMAC signatures between the control plane and each node agent
    clock.py     Redis's clock: what signed messages are stamped with and judged by
    generation.py noticing that Redis lost its data (the `cohort:generation` marker)
    acl.py       Redis ACL users per role (`cohort redis-acl`)

Imported by every zone (control plane, node, replica): it holds no SQL and no FastAPI or
Celery.
"""
