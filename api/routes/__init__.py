"""The api's routers: one per resource under /api/v1, and the dashboard's pages.

    jobs.py         submit, list, read, cancel, status history
    validation.py   a job spec checked as a submission is, nothing stored
    metrics.py      a job's metric points (filters, downsampling)
    logs.py         a job's log lines
    streams.py      live streams (SSE): one job's events, the project's jobs
    artifacts.py    a job's artifacts: list, download a file or directory
    bundles.py      code bundles: ask whether the project has one, upload one
    data.py         a project's data in the store: upload, list, delete
    nodes.py        the node registry
    schedules.py    retraining schedules, run now, the promoted model
    sweeps.py       sweeps: create, list, read with every trial, cancel
    projects.py     a project's settings (admins): its quota, its MLflow server
    tokens.py       API tokens (admins): issue, list, revoke
    whoami.py       the caller's own token: project, name, scopes
    health.py       liveness and readiness probes
    prometheus.py   `GET /metrics` for a scraper holding METRICS_TOKEN
    dashboard.py    the dashboard: every page family, login, the static assets
    pages.py        what every dashboard page is built with: router, render, 404
    login.py        the dashboard's login and logout
    job_pages.py    the dashboard's job pages: the jobs table, one job, live fragments
    sweep_pages.py  the dashboard's sweep pages
    cluster_pages.py  the dashboard's cluster page and schedules page

Each router carries its scope rule where it is made (api/deps.py, `scoped`).
"""
