"""Jobs: the spec and its I/O schemas, create/read/list/cancel, the status transitions, and which
trainers a job may name. SQL-side: imported by the api and the control plane only."""
