"""The artifact store: bundles, checkpoints, models, TensorBoard files and finished logs.

Node-safe: no SQL, no FastAPI, no Celery (agents import it)."""
