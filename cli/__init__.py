"""The `cohort` command (Typer and Rich): the services, the local stack, and a client of
the REST API built on the SDK.

    main.py         the `cohort` app: every command and group registered, one way
    aliases.py      the old spellings, accepted for one release with a line naming the new
    __main__.py     `python -m cli`
    processes.py    `cohort api | scheduler | agent | migrate | up | demo | create-token`
    stack.py        the whole stack on one machine (`cohort up`, `cohort demo`)
    stack_secrets.py    the stack's secrets kept on disk (token, keys, password)
    stack_ports.py  the stack's ports: the api's, the embedded Redis's, the replicas' range
    health.py       `cohort health api|scheduler|agent`
    keys.py         `cohort node-key`, `cohort redis-acl`
    jobs.py         `cohort job submit | list | show | logs | metrics | cancel`
    run.py          `cohort run -- python train.py`: a command job, no spec file
    submission.py   check the spec, upload the code, submit, follow (`job submit`, `run`)
    tensorboard.py  `cohort tensorboard JOB...`: the jobs' TensorBoard files in a TensorBoard
    board_fetch.py  their files fetched into a local directory, only what is new
    nodes.py        `cohort node list`
    artifacts.py    `cohort artifact list | download`
    bundles.py      `cohort bundle push`, and `--code` of `cohort job submit`
    data.py         `cohort data push | list | delete`
    schedules.py    `cohort schedule list | show | create | update | pause | resume | delete |
                    run | model`
    models.py       `cohort model list | show | register | alias | download`
    sweeps.py       `cohort sweep create | list | show | cancel`
    sweep_follow.py `--follow` of a sweep: a live table of trials
    quotas.py       `cohort quota show | set`
    tokens.py       `cohort token list | create | revoke`
    webhooks.py     `cohort webhook create | list | delete | ping | deliveries`
    login.py        `cohort login`: check a token, save it with its URL for this user
    user_config.py  the per-user config, and where a command's URL and token come from
    options.py      the options every API command shares, one guarded call, spec files,
                    --json and --output
    transfers.py    the progress bar of an upload or download (on a terminal only)
    follow.py       following a job from its SSE stream: a bar per replica

Every API call goes through the Python SDK (cohort/client.py): one client, not two.
"""
