"""Control-plane processes (hold SQL credentials).

scheduler.py  the scheduler process: leadership, the pass loop, events as they come
beats.py      heartbeats and progress beats read from Redis, checked and timed on arrival
events.py     agent events (replica started, exited, restarted) checked and applied to SQL
ingest.py     metric batches and log lines from Redis streams into SQL
tracking.py   the MLflow export's thread: rounds paced to a share of a core
webhooks.py   the webhook sender's thread: deliveries claimed, sent, recorded
streams.py    reading a Redis stream through the leader's consumer group
dispatch.py   the scheduler's messages sent to node queues through Celery
envelopes.py  a Celery task message's Redis payload, written without Celery's publish
term.py       one leadership term: its fencing token and whether it still lasts
pacing.py     when the leader runs its next pass: wake-ups coalesced, bounded delay
refusals.py   what the scheduler ignores: unsigned events, reports from the wrong node
"""
