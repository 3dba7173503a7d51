"""Webhooks: a project's events (jobs ended, sweeps ended, schedules fired, model versions
and aliases) sent as signed JSON to the URLs its admins registered.

settings.py  the cluster's webhook settings (timeout, how long to retry, networks allowed)
events.py    the event names a webhook may subscribe to
schemas.py   the API's shapes: a webhook created and read, its deliveries and attempts
targets.py   server-side request forgery: which URLs and addresses may be sent to
outbox.py    emit(): one delivery per subscribed webhook, in the caller's transaction
payloads.py  what an event says about a job, a sweep, a schedule's fire (small)
signing.py   the signature headers (HMAC-SHA256 over the timestamp and the body)
store.py     webhooks created, read, deleted; deliveries listed; a test event
posting.py   one attempt's POST, to the checked address, redirects not followed
sender.py    one round of the control plane's sender: claim due deliveries, POST, record

The api imports all but sender.py; the scheduler's leader runs sender.py in a thread.
"""
