"""Sweeps: many trials of one job template over a search space, the best one found.
Optuna carries out the search algorithm and the early-stopping rule.

schemas.py    the sweep spec (template, algorithm, space, objective, early stopping), views
rules.py      the early-stopping rules' specs: median, asha, hyperband
space.py      the space apart from Optuna: its size, the points checked up front (pure)
store.py      create (every check up front), read, list, cancel
views.py      the API view: trials with parameters and objective values, the best
objective.py  a trial's objective value from its stored metrics; the best trial
study.py      a sweep's Optuna study in memory: samplers, pruners, ask, should_prune
study_cache.py  the studies a scheduler keeps between passes, caught up with the rows
history.py    the trials as the study sees them, read from the database; their rows
trials.py     new trials: parameters asked of the study, jobs and rows created
stopping.py   early stopping: the rule's pruner judges the running trials
advance.py    the scheduler pass's part: create trials in turn, stop, finish sweeps
"""
