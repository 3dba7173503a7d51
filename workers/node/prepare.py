"""Before a replica's process starts: its code and its input files, from the store, and
the environment its requirements install (workers/node/envs.py).

Run on a thread of its own, never on a Celery task's (a 100 MB bundle takes a while, and
a task must stay short); the agent starts the process when this returns.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

import redis

from services.settings import Settings
from services.storage.bundles import Limits
from services.storage.store import ArtifactStore, open_store
from services.wire.client import publish_node_event
from services.wire.events import ReplicaPreparing
from services.wire.replica import ReplicaSpec
from workers import layout
from workers.node import envs_build, isolation
from workers.node.bundle_cache import BundleCache, BundleUnavailable
from workers.node.environment import agent_marks
from workers.node.envs import EnvCache

log = logging.getLogger("cohort.agent")


class InputUnavailable(BundleUnavailable):
    """An input file the job names is not in the artifact store."""


class Preparer:
    """Fetches what replicas need from the artifact store (opened on first use)."""

    def __init__(
        self, settings: Settings, client: redis.Redis | None = None, node_key: str = ""
    ) -> None:
        self.settings = settings
        self._events = client, node_key  # where it says what a start waits for
        self._lock = threading.Lock()
        self._store: ArtifactStore | None = None
        self._cache: BundleCache | None = None
        python = settings.REPLICA_PYTHON or sys.executable
        self.envs = EnvCache(
            settings.data_dir,
            python,
            settings.ENV_CACHE_BYTES,
            envs_build.build_uid(settings.REPLICA_UID_BASE) if isolation.is_root() else None,
        )
        self.envs.marks = agent_marks(settings.node_id, settings.data_dir)

    @staticmethod
    def needed(spec: ReplicaSpec) -> bool:
        """Whether `spec` needs anything fetched or built before its process starts."""
        return (
            spec.bundle is not None
            or bool(spec.inputs)
            or bool(spec.requirements)
            or spec.evaluation is not None
        )

    def _open(self) -> tuple[ArtifactStore, BundleCache]:
        with self._lock:
            if self._store is None or self._cache is None:
                self._store = open_store(settings=self.settings)
                limits = Limits(
                    max_bytes=self.settings.MAX_BUNDLE_BYTES,
                    max_files=self.settings.MAX_BUNDLE_FILES,
                    max_unpacked_bytes=self.settings.MAX_BUNDLE_UNPACKED_BYTES,
                )
                self._cache = BundleCache(
                    layout.bundle_cache_dir(self.settings.data_dir),
                    self._store,
                    self.settings.BUNDLE_CACHE_BYTES,
                    limits,
                )
            return self._store, self._cache

    def prepare(self, spec: ReplicaSpec) -> str | None:
        """Unpack the bundle into the replica's code directory (as the job's user), fetch
        its inputs and build (or reuse) its requirements' environment; returns that
        environment's interpreter (None: the node's), to `release` once the replica ends.

        Raises:
            BundleUnavailable: the bundle cannot be had, or InputUnavailable: an input
                (the message says why). RequirementsFailed: pip failed (its last lines).
        """
        self._fetch(spec)
        if not spec.requirements:
            return None
        paths = layout.ReplicaPaths.of(
            self.settings.data_dir, spec.job_id, spec.attempt, spec.index
        )
        # Into the replica's log (the agent ships it live while this runs): the job's
        # logs say "installing N packages", then pip's own lines.
        fd = os.open(paths.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with open(fd, "a", encoding="utf-8", errors="replace") as log_file:
            return self.envs.ensure(
                spec.requirements, log_file, lambda note: self._announce(spec, note)
            )

    def _announce(self, spec: ReplicaSpec, note: str) -> None:
        """Tell the control plane what replica `spec`'s start waits for: the job view,
        its events and its live stream show it (services/cluster/preparing.py)."""
        client, node_key = self._events
        if client is None:
            return
        event = ReplicaPreparing(
            self.settings.node_id, spec.job_id, spec.attempt, spec.index, note, time.time()
        )
        try:
            publish_node_event(client, event, node_key)
        except redis.RedisError as exc:  # the start goes on: only the note is lost
            log.warning("could not say that job %d's replica is %s: %s", spec.job_id, note, exc)

    def release(self, python: str | None) -> None:
        """The replica that `prepare` returned `python` for has ended (or never started)."""
        if python is not None:
            self.envs.release(python)

    def _fetch(self, spec: ReplicaSpec) -> None:
        store, cache = self._open()
        data_dir = self.settings.data_dir
        user = isolation.replica_user(self.settings, spec.job_id)
        if spec.bundle is not None:
            # Unpacked as the job's own uid, by the interpreter its replicas run with
            # (isolation.check_node proved that uid can run it with Cohort's code).
            cache.checkout(
                spec.bundle,
                layout.code_dir(data_dir, spec.job_id, spec.attempt, spec.index),
                user=user,
                python=self.settings.REPLICA_PYTHON or sys.executable,
            )
        inputs = layout.input_dir(data_dir, spec.job_id)
        for name, key in sorted(spec.inputs.items()):
            self._fetch_input(store, key, inputs / name)
            isolation.share_read_only(inputs / name, user)
        if spec.evaluation is not None:
            dirs = layout.job_dirs(data_dir, spec.job_id)
            for root, files in (
                (dirs.evaluated_model_dir, spec.evaluation.model),
                (dirs.holdout_dir, spec.evaluation.holdout),
            ):
                self._fetch_tree(store, root, files, user)

    def _fetch_tree(
        self,
        store: ArtifactStore,
        root: Path,
        files: dict[str, str],
        user: isolation.ReplicaUser | None,
    ) -> None:
        """{relative path: store key} fetched under `root`, each directory and file the
        agent's and read-only to the job (the wire contract refused paths leaving it)."""
        isolation.share_directory(root, user)
        for rel, key in sorted(files.items()):
            path = root
            for part in rel.split("/")[:-1]:
                path = path / part
                isolation.share_directory(path, user)
            self._fetch_input(store, key, root / rel)
            isolation.share_read_only(root / rel, user)

    @staticmethod
    def _fetch_input(store: ArtifactStore, key: str, path: Path) -> None:
        # Replicas of one job on this node share the input directory: a file already
        # here at the stored size is the same one (get_file renames into place whole).
        try:
            size = store.size(key)
        except FileNotFoundError:
            raise InputUnavailable(f"input {key!r} is not in the artifact store") from None
        if path.is_file() and path.stat().st_size == size:
            return
        store.get_file(key, path)
