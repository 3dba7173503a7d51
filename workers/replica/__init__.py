"""Replica-side code (the user's process; never SQL, never the api): the runner, metric
callbacks, resource sampler and the built-in trainers."""
