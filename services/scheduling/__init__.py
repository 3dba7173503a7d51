"""Scheduling: the scheduler's pass, the one room that drives the cluster, sweeps and
retraining together (each of those rooms stays ignorant of the others' turns).

    scheduler_pass.py  one pass: heartbeats, the watchdog, schedules, gangs, sweeps, the queue
"""
