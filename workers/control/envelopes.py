"""The Redis payload of one Celery task message, written without Celery's publish path.

A scheduling pass sends a start message per placed replica (1,250 for 500 gangs), and
Celery's `send_task` path (its routing, settings look-ups, kombu's producer and
serializer) cost about 0.1 ms a message: most of a busy pass's dispatch. What kombu's
Redis transport puts on a queue is one LPUSH of a JSON envelope; `task_envelope` writes
that same envelope, field for field and in the same order, for a task whose one argument
is a sealed message (tests/streams/test_dispatch.py compares it, byte for byte but for
the ids, with what `Celery.send_task` queues). The agents' real Celery workers consume it.

Only for the configuration the agents' app has (workers/celery_app.py): task protocol 2,
JSON, no compression, no sent events, one priority step; `supports_envelopes` says
whether an app has it, and the dispatcher takes Celery's own path when it has not.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from celery import Celery

# The body's third part: no callbacks, errbacks, chain or chord (Celery's as_task_v2).
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_DUMPS = json.JSONEncoder().encode  # what kombu's json.dumps writes for plain values


def supports_envelopes(app: Celery) -> bool:
    """Whether `app` publishes tasks as `task_envelope` writes them."""
    conf = app.conf
    options = conf.broker_transport_options or {}
    with app.connection_for_write() as connection:  # not connected: its URL read
        transport = connection.transport_cls
    return (
        transport in ("redis", "rediss")
        and conf.task_protocol == 2
        and conf.task_serializer == "json"
        and not conf.task_compression
        and not conf.task_send_sent_event
        # One queue key per node: a message of priority 0 goes on the queue's own key.
        and list(options.get("priority_steps", [])) == [0]
    )


class EnvelopeMaker:
    """The envelopes of one send: what is the same for all of them worked out once."""

    def __init__(self, app: Celery) -> None:
        from celery.utils.nodenames import anon_nodename

        self.origin = anon_nodename()  # "gen<pid>@<host>", as send_task names it
        self.reply_to = app.thread_oid
        self.delivery_mode = _delivery_mode(app.conf.task_default_delivery_mode)

    def envelope(self, task: str, sealed: str, queue: str) -> str:
        """The JSON Celery would LPUSH onto `queue` for `task` with the one argument
        `sealed` (send_task's message, shown as `argsrepr` rather than the whole argument)."""
        task_id = str(uuid.uuid4())
        body = base64.b64encode(_DUMPS([[sealed], {}, _EMBED]).encode("utf-8")).decode("ascii")
        rest: dict[str, Any] = {
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {
                "lang": "py",
                "task": task,
                "id": task_id,
                "shadow": None,
                "eta": None,
                "expires": None,
                "group": None,
                "group_index": None,
                "retries": 0,
                "timelimit": [None, None],
                "root_id": task_id,
                "parent_id": None,
                "argsrepr": f"[<{task} for {queue}>]",
                "kwargsrepr": "{}",
                "origin": self.origin,
                "ignore_result": None,
                "replaced_task_nesting": 0,
                "stamped_headers": None,
                "stamps": {},
            },
            "properties": {
                "correlation_id": task_id,
                "reply_to": self.reply_to,
                "delivery_mode": self.delivery_mode,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
        # The body first, as kombu writes it, spliced in rather than encoded again: base64
        # needs no escaping, and the encoder's scan of its kilobytes was a third of the time.
        return f'{{"body": "{body}", {_DUMPS(rest)[1:]}'


def _delivery_mode(mode: Any) -> int:
    """kombu's number for a delivery mode Celery's settings may name."""
    return {"transient": 1, "persistent": 2}.get(mode, mode) if mode else 2
