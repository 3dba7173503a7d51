"""Control-plane processes (hold SQL credentials): the scheduler leader, the ingest, the dispatcher
that sends the scheduler's messages through Celery."""
