"""What crosses a process boundary: typed contracts (replica spec, messages, events, batches,
feed rows, heartbeats) with one encoder and one decoder each, and every Redis key and stream name.

Imported by every zone (control plane, node, replica): it holds no SQL and no FastAPI or Celery.
"""
