"""Retraining: schedules that submit jobs on a cron, an interval or new data, fired
exactly once, judged (evaluation jobs on a holdout) and promoted into the registry.

schedules.py  create, read, list, update, pause/resume, delete
schemas.py    what a user gives: a schedule to create or update, its promote and evaluate
read_schemas.py  what the API answers: a schedule, its runs and evaluations, its model
cron.py       fire times of a schedule (cron expressions or an interval)
firing.py     each due fire time creates one job, exactly once; missed fire times
fire_runs.py  one fire time's job or sweep under the concurrency policy, and its record
fire_env.py   what a fire tells its run: COHORT_SCHEDULED_FOR, the data interval or version
data_triggers.py  firing once per new content of a schedule's data, debounced
trigger_schemas.py  the data trigger's I/O schemas, mixed into the schedules'
promotion.py  promotion of scheduled runs' models; job history limits
evaluation.py champion against challenger: evaluation jobs on a schedule's holdout
promoted.py   a schedule's promoted model, read from the model registry
"""
