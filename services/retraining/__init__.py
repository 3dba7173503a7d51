"""Retraining: cron schedules, firing them exactly once, promotion of scheduled runs' models."""
