"""The `cohort` command (Typer and Rich): the services, the local stack, and a client of
the REST API.

    main.py         the `cohort` app: service commands, every group registered
    __main__.py     `python -m cli`
    stack.py        the whole stack on one machine (`cohort up`, `cohort demo`)
    health.py       `cohort health api|scheduler|agent`
    keys.py         `cohort node-key`, `cohort redis-acl`
    commands.py     `cohort jobs | get | logs | metrics | cancel | nodes`
    code.py         `cohort bundle push`, `artifacts`, `download`, and `--code`
    data.py         `cohort data push | ls | rm`
    schedules.py    `cohort schedules ...`
    sweeps.py       `cohort sweep ...`
    sweep_follow.py `cohort sweep show ID --follow`: a live table of trials
    quotas.py       `cohort quota show | set`
    tokens.py       `cohort tokens list | create | revoke`
    options.py      the options every API command shares, one guarded call, spec files
    client.py       a small client of the REST API (CLI, demo, benchmarks)
    follow.py       following a job from its SSE stream: a bar per replica
    sse.py          a small Server-Sent Events reader over httpx
"""
