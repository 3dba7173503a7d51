"""The settings of drains, stragglers and quarantined nodes, a part of `Settings`
(services/settings.py); docs/operations.md#draining-a-node and
docs/failures.md#stragglers-and-quarantine explain them."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class HealthSettings(BaseSettings):
    """Drains (services/cluster/drains.py), stragglers (stragglers.py) and quarantine
    (quarantine.py)."""

    # How long a drained node's gangs get to checkpoint before the drain stops and moves
    # them; an agent sent SIGTERM waits this long (plus 10 s) for its replicas.
    DRAIN_GRACE: float = Field(120.0, gt=0)

    # A replica whose busy time per step stays above STRAGGLER_FACTOR times its peers'
    # median for STRAGGLER_STEPS steps in a row is named a straggler in its job's events.
    STRAGGLER_FACTOR: float = Field(2.0, gt=1.0)
    STRAGGLER_STEPS: int = Field(50, ge=1, le=100_000)
    # A node where QUARANTINE_FAILURES replicas failed for the node's reasons (lost,
    # killed by a signal, no space) or straggled within QUARANTINE_WINDOW seconds takes no
    # new replicas until `cohort node undrain` (0: no node is ever quarantined).
    QUARANTINE_FAILURES: int = Field(3, ge=0, le=1000)
    QUARANTINE_WINDOW: float = Field(3600.0, gt=0)
    # At most this share of the live nodes quarantined at once (0.5: half; one node alone
    # never): faults on most nodes alike are not a node's (services/cluster/quarantine.py).
    QUARANTINE_MAX_SHARE: float = Field(0.5, ge=0, le=1)
