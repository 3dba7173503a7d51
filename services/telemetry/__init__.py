"""Telemetry: what jobs report, stored once and read back, live or after the fact.

metrics.py       metric points: stored once (idempotent), read back with filters
downsample.py    a series thinned for charts (bucket means, from the rollups)
curves.py        one metric's curve for each of many jobs (a sweep's chart)
logs.py          replica log lines: the `cohort:logs` protocol, stored, read back
progress.py      a job's epoch/step, percent done and ETA
scaling.py       a finished job's examples/s and scaling against a 1-replica run
live.py          the live feeds' writer: what the ingest publishes after each commit
follow.py        following a job: its events after a cursor, history then live, to the end
project_follow.py following a project: its jobs' status changes
shared_reads.py  the SQL reads a process's followers share, once a period
feed_hub.py      one reader of the live feeds for all the followers of a process
stream_order.py  a job's points, lines and status changes in the one order they were stored
settling.py      when a finished job will have no more points or lines
cursor.py        where a follower is, and the events that move it on
stream_state.py  what the live streams read about jobs, one short transaction each
job_views.py     the job view (`JobRead`) REST answers and the streams send
prometheus.py    the service's own Prometheus figures, read at scrape time
summaries.py     the dashboard's read-only summaries
hints.py         what to tell a person whose job reported no metrics
"""
