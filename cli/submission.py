"""Submitting a job from the command line, shared by `cohort job submit` and `cohort run`:
check the spec, pack and upload the code, submit, and follow to the end if asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli.options import connect, console, emit_json, err, guarded
from cohort.uploads import PENDING_BUNDLE


def submit_spec(
    spec: dict[str, Any],
    *,
    code: Path | None,
    follow: bool,
    token: str | None,
    url: str | None,
    idempotency_key: str | None,
    as_json: bool,
    output: bool = True,
) -> None:
    """Submit `spec`; with `code`, the server checks the spec first (a typo fails in a
    second, before anything is packed or sent), then the directory is uploaded (once: an
    unchanged one is not sent again) and the spec names it. `output`: --follow shows the
    replicas' output too."""
    from cli.bundles import push_bundle
    from cli.jobs import follow_to_end

    say = err if as_json else console
    client = connect(url, token)
    if code is not None:
        guarded(lambda: client.validate({**spec, "bundle": PENDING_BUNDLE}, bundle_pending=True))
        spec = {**spec, "bundle": guarded(lambda: push_bundle(client, code, say)).digest}
    job = guarded(lambda: client.submit(spec, idempotency_key=idempotency_key))
    if as_json and not follow:
        emit_json(job)
        return
    say.print(f"submitted job {job['id']} ({job['status']})")
    if follow:
        follow_to_end(client, job["id"], as_json, output=output)
