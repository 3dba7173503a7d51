"""Old import path of the control plane's messages, kept for modules outside the wire's
owners (services/cluster/watchdog.py): new code imports services.wire.replica."""

from services.wire.replica import CleanupJob, Dispatcher, Message, StartReplica, StopReplica

__all__ = ["CleanupJob", "Dispatcher", "Message", "StartReplica", "StopReplica"]
