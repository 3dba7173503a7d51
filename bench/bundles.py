"""What a code bundle costs, from the user's upload to the agent's copy for a replica.

Upload: pack, HEAD + PUT to a real api process, and a second push of the same tree (HEAD
only); with the api's peak memory during the upload, which stays flat because the body is
streamed to disk, never held whole. Agent: what workers/node/bundle_cache.BundleCache
takes for the bundle the api stored — cold cache (fetch from the store, verify the
sha256, checked unpack, copy into the replica's code directory; the fetch alone is also
timed) and warm cache (the copy alone).

Bundles of random (incompressible) bytes, 10 MB and 100 MB by default; the api on SQLite;
the store a directory under DATA_DIR, and a real S3 server (moto's standalone server).

    .venv/bin/python bench/bundles.py [--sizes 10,100] [--repeat 3] [--stores local,s3]

`--checkout` measures instead what each replica's copy of the code costs: the agent's
unpack in a child process as the job's uid (workers/node/code_unpack.py, what a replica
gets) against copying a tree unpacked once (what a node could do instead). Rounds
interleave the two, alternating which goes first; the figure is the median of the
per-round ratios.

    .venv/bin/python bench/bundles.py --checkout [--files 200] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from cohort.bundles import BundleInfo, pack  # noqa: E402
from cohort.client import Client  # noqa: E402
from services.settings import get_settings  # noqa: E402
from services.storage.bundles import Limits  # noqa: E402
from services.storage.keys import bundle_digest_hex, bundle_key  # noqa: E402
from services.storage.store import ArtifactStore, open_store  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402
from tests.s3server import CREDENTIALS, create_bucket, moto_server  # noqa: E402
from workers.node import isolation  # noqa: E402
from workers.node.bundle_cache import BundleCache, unpack_as  # noqa: E402


def tree(root: Path, megabytes: int) -> Path:
    """A directory of `megabytes` MB of random bytes in 1 MB files, plus a script."""
    root.mkdir(parents=True)
    (root / "train.py").write_text("print('hello')\n")
    for i in range(megabytes):
        (root / f"shard-{i:04d}.bin").write_bytes(os.urandom(1_000_000))
    return root


class PeakRss(threading.Thread):
    """The peak resident memory of a process (and its children) while running."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def rss(self) -> int:
        procs = [self.process, *self.process.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs if p.is_running())

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)


def packed(tmp: Path, megabytes: int, repeat: int) -> tuple[list[BundleInfo], list[Path], float]:
    """`repeat` distinct trees of `megabytes` MB packed: their infos, archives, median pack s."""
    infos, archives, seconds = [], [], []
    for attempt in range(repeat):
        code = tree(tmp / f"code-{megabytes}-{attempt}", megabytes)
        archive = tmp / f"b-{megabytes}-{attempt}.tar.gz"
        started = time.perf_counter()
        infos.append(pack(code, archive))
        seconds.append(time.perf_counter() - started)
        archives.append(archive)
        shutil.rmtree(code)
    return infos, archives, statistics.median(seconds)


def upload(
    client: Client, api_pid: int, info: BundleInfo, archive: Path
) -> tuple[float, float, float]:
    """Seconds for HEAD + PUT, for the second push (HEAD), and the api's growth in MiB."""
    watcher = PeakRss(api_pid)
    before = watcher.rss()
    watcher.start()
    started = time.perf_counter()
    assert not client.has_bundle(info.digest)
    client.upload_bundle(info.digest, archive)
    put = time.perf_counter() - started
    watcher.running = False
    watcher.join()
    started = time.perf_counter()
    assert client.has_bundle(info.digest)  # the second push: nothing is sent
    return put, time.perf_counter() - started, (watcher.peak - before) / 2**20


def agent(store: ArtifactStore, digest: str, tmp: Path) -> tuple[float, float, float]:
    """Seconds for a cold checkout, the store fetch alone, and a warm checkout."""
    cache = BundleCache(tmp / f"cache-{uuid.uuid4().hex[:8]}", store, 2**40, Limits())
    started = time.perf_counter()
    cache.checkout(digest, tmp / "replica-0" / "code")
    cold = time.perf_counter() - started
    started = time.perf_counter()
    cache.checkout(digest, tmp / "replica-1" / "code")
    warm = time.perf_counter() - started
    started = time.perf_counter()
    store.get_file(bundle_key(bundle_digest_hex(digest)), tmp / "fetched.tar.gz")
    fetch = time.perf_counter() - started
    for path in (cache.root, tmp / "replica-0", tmp / "replica-1", tmp / "fetched.tar.gz"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return cold, fetch, warm


@contextmanager
def store_env(kind: str) -> Iterator[dict[str, str]]:
    """The environment naming a fresh store: a directory, or a bucket on a moto server."""
    if kind == "local":
        yield {}
        return
    with moto_server(free_port()) as endpoint:
        create_bucket(endpoint, "bench")
        yield {
            "COHORT_ARTIFACT_URL": f"s3://bench/{uuid.uuid4().hex[:8]}",
            "COHORT_ARTIFACT_ENDPOINT_URL": endpoint,
            **CREDENTIALS,
        }


def one_store(
    kind: str, tmp: Path, bundles: dict[int, tuple[list[BundleInfo], list[Path], float]]
) -> None:
    with store_env(kind) as env:
        os.environ.update(env)  # for open_store() here, as the api and agents read it
        get_settings.cache_clear()
        data_dir = tmp / f"data-{kind}"
        stack = Stack(
            {
                "COHORT_DATABASE_URL": "",
                "COHORT_DATA_DIR": str(data_dir),
                "COHORT_REDIS_URL": os.environ.get("COHORT_REDIS_URL", ""),
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_API_PORT": str(free_port()),
                **env,
            },
            quiet=True,
        )
        stack.start(parts=("api",))
        try:
            client = Client(stack.url, stack.token, timeout=300)
            store = open_store(env.get("COHORT_ARTIFACT_URL") or str(data_dir / "artifacts"))
            for megabytes, (infos, archives, pack_s) in bundles.items():
                ups = [
                    upload(client, stack.child("api").pid, info, archive)
                    for info, archive in zip(infos, archives, strict=True)
                ]
                agents = [agent(store, info.digest, tmp) for info in infos]
                med = statistics.median
                put, again = med(u[0] for u in ups), med(u[1] for u in ups)
                cold, fetch, warm = (med(a[i] for a in agents) for i in range(3))
                print(
                    f"| {kind} | {megabytes} MB | {pack_s:.2f} s | {put:.2f} s "
                    f"({megabytes / put:.0f} MB/s) | {again * 1000:.1f} ms | "
                    f"{max(u[2] for u in ups):.1f} MiB | {cold:.2f} s | {fetch:.2f} s | "
                    f"{warm:.2f} s |",
                    flush=True,
                )
        finally:
            stack.stop()
            for name in env:
                os.environ.pop(name, None)
            get_settings.cache_clear()


def code_tree(root: Path, files: int) -> Path:
    """A code directory of `files` Python modules of ~10 KB in ten packages (200 make
    about 2 MB, like a bundle of a real project's code)."""
    for i in range(files):
        package = root / f"pkg{i % 10}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"mod{i:04d}.py").write_text(f"VALUE_{i} = {os.urandom(5000).hex()!r}\n")
    return root


def checkout_round(
    archive: Path, unpacked: Path, tmp: Path, user: isolation.ReplicaUser | None, child_first: bool
) -> tuple[float, float]:
    """One replica's checkout both ways: (unpack in a child as `user`, copy of the tree) s."""
    parent = Path(tempfile.mkdtemp(dir=tmp))
    if user is not None:  # as the agent lays a replica's work directory out: the job's own
        os.chown(parent, user.uid, user.gid)

    def child() -> float:
        started = time.perf_counter()
        with open(archive, "rb") as handle:
            unpack_as(handle, parent / "child", Limits(), python=sys.executable, user=user)
        return time.perf_counter() - started

    def copy() -> float:
        started = time.perf_counter()
        shutil.copytree(unpacked, parent / "copy", symlinks=True)
        return time.perf_counter() - started

    if child_first:
        child_s, copy_s = child(), copy()
    else:
        copy_s, child_s = copy(), child()
    shutil.rmtree(parent)
    return child_s, copy_s


def checkout(files: int, rounds: int) -> None:
    """Print the table of one bundle of `files` files checked out both ways."""
    with tempfile.TemporaryDirectory(prefix="cohort-bench-checkout-") as scratch:
        tmp = Path(scratch)
        tmp.chmod(0o711)  # the job's uid passes through to its own directory
        archive = tmp / "bundle.tar.gz"
        info = pack(code_tree(tmp / "code", files), archive)
        user = isolation.replica_user(get_settings(), 1)
        unpacked = tmp / "unpacked-once"
        with open(archive, "rb") as handle:
            unpack_as(handle, unpacked, Limits(), python=sys.executable, user=None)
        times = [checkout_round(archive, unpacked, tmp, user, i % 2 == 0) for i in range(rounds)]
        med = statistics.median
        child_s, copy_s = med(t[0] for t in times), med(t[1] for t in times)
        ratio = med(t[0] / t[1] for t in times)
        print(
            f"# {platform.node()} {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores; {rounds} interleaved rounds; unpack as "
            f"{'uid ' + str(user.uid) if user else 'this user'}"
        )
        print("| bundle | unpack in a child (median) | copy of a tree (median) | ratio (median) |")
        print("|---|---|---|---|")
        print(
            f"| {info.files} files, {info.size / 1024:.0f} KiB | {child_s:.3f} s | "
            f"{copy_s:.3f} s | {ratio:.1f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100", help="bundle sizes in MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="local,s3", help="local and/or s3 (moto)")
    parser.add_argument("--checkout", action="store_true", help="a replica's checkout only")
    parser.add_argument("--files", type=int, default=200, help="--checkout: bundle files")
    parser.add_argument("--rounds", type=int, default=30, help="--checkout: rounds")
    args = parser.parse_args()
    if args.checkout:
        checkout(args.files, args.rounds)
        return
    with tempfile.TemporaryDirectory(prefix="cohort-bench-bundles-") as scratch:
        tmp = Path(scratch)
        bundles = {mb: packed(tmp, mb, args.repeat) for mb in map(int, args.sizes.split(","))}
        print(
            f"# {platform.node()} {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores; api on SQLite; median of {args.repeat}"
        )
        print(
            "| store | bundle | pack | HEAD + PUT | push again (HEAD) | api memory growth "
            "| agent, cold cache | of which fetch | agent, warm cache |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for kind in args.stores.split(","):
            one_store(kind, tmp, bundles)


if __name__ == "__main__":
    main()
