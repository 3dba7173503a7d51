"""Sweeps: many trials of one job template over a search space, the best one found.

schemas.py    the sweep spec (template, space, objective, early stopping) and its views
space.py      the parameters of trial i: grid combinations, seeded random draws (pure)
store.py      create (every trial checked up front), read, list, cancel
views.py      the API view: trials with parameters and objective values, the best
objective.py  a trial's objective value from its stored metrics; the best trial
stopping.py   the median stopping rule
advance.py    the scheduler pass's part: create trials in turn, stop, finish sweeps
"""
