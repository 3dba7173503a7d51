"""Redis ACL users per role, derived from the key names in services/wire/keys.py: what
`cohort redis-acl` prints for a Redis 6+ `aclfile` (docs/redis.md, "ACL users").

* `default`, the control plane (api, scheduler, `cohort migrate` needs none): every key
  and command but the @dangerous ones (FLUSHALL, KEYS, CONFIG, DEBUG, ...);
* `agent-<node>`, one per node: its own Celery queue and Celery's bookkeeping of it, the
  writes its work needs (events, its heartbeat, metrics, logs, progress, the replica
  claims, the data-generation marker), and reads of the current attempts and of the
  nodes and progress hashes; no other queue, no stream read (XREAD, XRANGE), no other
  key;

Replicas get no Redis user: they report through their agent (docs/security.md, "Replicas
on a node"), which alone could not keep them to their own job's keys.

What Celery (kombu's Redis transport) needs of the agent was found with a real agent and
job (tests/e2e/test_redis_acl.py): BRPOP on the queue, SADD of the queue's binding, and
kombu's unacknowledged-message bookkeeping, which by default is three keys shared by
every consumer; the agent names its own (`unacked_keys`), so no agent sees another's
messages there. Passwords are written as SHA-256 hashes (`#...`): the file is no secret.
"""

from __future__ import annotations

import hashlib
import re

from services.wire.keys import (
    EVENTS_STREAM,
    GENERATION_KEY,
    LOGS_STREAM,
    METRICS_STREAM,
    NODES_HASH,
    OUTPUT_HASH,
    PROGRESS_HASH,
    node_queue,
)

# Node ids that are safe inside an ACL key pattern (no glob characters, no spaces).
ACL_NODE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# kombu's routing table of an exchange (a set), and its record that the table is kept.
BINDING_PREFIXES = ("_kombu.binding.", "_kombu.binding_permanent.")
UNACKED_PREFIX = "cohort:unacked:"

# Connection housekeeping. Not CLIENT SETINFO, which redis-py sends on connect: Redis
# before 7.2 does not know it (the file would not load), and redis-py ignores its refusal.
# TIME: messages are judged by Redis's clock, not the node's (services/wire/clock.py).
_CONNECTION = "+ping +client|setname +select +time"
# kombu's consumer: BRPOP the queue; declare (SADD) its binding; keep unacknowledged
# messages in a hash and a sorted set under a mutex (SET NX, WATCH/MULTI/EXEC), and put
# them back on the queue (LPUSH) when not acknowledged in time.
_CELERY_CONSUMER = (
    "+brpop +lpush +rpush +llen +sadd +smembers +srem +zadd +zrem +zrange "
    "+hset +hget +hdel +set +get +del +exists +pexpire +watch +unwatch "
    "+multi +exec +discard"
)
_AGENT_COMMANDS = f"{_CONNECTION} {_CELERY_CONSUMER} +xadd +evalsha +script|load"


def unacked_keys(node_id: str) -> dict[str, str]:
    """kombu's transport options naming node `node_id`'s own unacknowledged-message keys
    (by default every consumer shares `unacked`, `unacked_index`, `unacked_mutex`)."""
    base = f"{UNACKED_PREFIX}{node_id}"
    return {
        "unacked_key": base,
        "unacked_index_key": f"{base}:index",
        "unacked_mutex_key": f"{base}:mutex",
    }


def agent_user(node_id: str) -> str:
    """The ACL user name of node `node_id`'s agent."""
    return f"agent-{node_id}"


def _password(password: str) -> str:
    if len(password) < 16:
        raise ValueError("each Redis password must be at least 16 characters")
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def control_rule(password: str) -> str:
    """The control plane's user (`default`: URLs with no user name log in as it)."""
    return f"default on {_password(password)} ~* &* +@all -@dangerous +info"


def agent_rule(node_id: str, password: str) -> str:
    """Node `node_id`'s agent: its queue, its writes, nothing else."""
    if not ACL_NODE_ID.fullmatch(node_id):
        raise ValueError(f"node id {node_id!r}: an ACL needs 1-64 letters, digits, '.', '_' or '-'")
    queue = node_queue(node_id)
    unacked = f"{UNACKED_PREFIX}{node_id}"
    keys = [
        f"~{queue}",
        *(f"~{prefix}{queue}" for prefix in BINDING_PREFIXES),
        f"~{unacked}",
        f"~{unacked}:*",
        "%R~cohort:attempt:*",
        "%W~cohort:claim:*",
        f"%W~{EVENTS_STREAM}",
        f"%RW~{NODES_HASH}",
        f"%W~{METRICS_STREAM}",
        f"%W~{LOGS_STREAM}",
        f"%RW~{PROGRESS_HASH}",
        f"%W~{OUTPUT_HASH}",
        # Read, and written again when missing: how an agent notices that Redis lost
        # its data (services/wire/generation.py).
        f"%RW~{GENERATION_KEY}",
    ]
    return (
        f"{agent_user(node_id)} on {_password(password)} resetkeys resetchannels "
        f"-@all {_AGENT_COMMANDS} {' '.join(keys)}"
    )


def acl_file(*, control_password: str, agents: dict[str, str]) -> str:
    """An `aclfile` with every role's user: `agents` maps node ids to their passwords."""
    lines = [f"user {control_rule(control_password)}"]
    lines += [
        f"user {agent_rule(node_id, password)}" for node_id, password in sorted(agents.items())
    ]
    return "\n".join(lines) + "\n"
