"""Retraining: cron schedules that submit jobs, fired exactly once, and promotion.

schedules.py  create, read, list, update, pause/resume, delete
schemas.py    the schedules' I/O schemas
cron.py       fire times of a schedule (cron expressions or an interval)
firing.py     each due fire time creates one job, exactly once; missed fire times
fire_runs.py  one fire time's job or sweep under the concurrency policy, and its record
promotion.py  promotion of scheduled runs' models; job history limits
evaluation.py champion against challenger: evaluation jobs on a schedule's holdout
promoted.py   a schedule's promoted model, read from the model registry
"""
