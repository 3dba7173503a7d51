"""The services a benchmark measures, as processes: started from a checkout, waited on
until `/healthz` answers, stopped; and raw SSE clients of the api.

One place for what every api benchmark does around its measurement (bench/pg.py is the
same for databases), so their figures differ only by what they measure.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent

# A loaded machine (other test suites on the same two cores) starts the api slowly.
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_cli(
    args: list[str],
    env: Mapping[str, str],
    *,
    cwd: Path = ROOT,
    log: Path | None = None,
    python: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """`python -m cli ARGS` of the checkout at `cwd`; its output goes to `log` (appended),
    or nowhere. `python` replaces the interpreter's argv (e.g. to run under cProfile)."""
    argv = [*(python or [sys.executable]), "-m", "cli", *args]
    if log is None:
        return subprocess.Popen(
            argv, cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT)


def wait_healthy(
    url: str, processes: Mapping[str, subprocess.Popen[bytes]], timeout: float = START_TIMEOUT
) -> None:
    """Until `url/healthz` answers 200; fails when one of `processes` exits first (they
    are stopped then, not left behind) or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        for name, process in processes.items():
            if process.poll() is not None:
                stop(*processes.values())
                raise RuntimeError(f"{name} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            stop(*processes.values())
            raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")
        time.sleep(0.2)


def start_api(
    env: Mapping[str, str], *, cwd: Path = ROOT, log: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`cohort api` on a free port, once it answers; the process and its base URL."""
    port = free_port()
    process = start_cli(["api", "--port", str(port)], env, cwd=cwd, log=log)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, {"api": process})
    return process, url


def stop(*processes: subprocess.Popen[bytes] | None, grace: float = 20.0) -> None:
    """SIGTERM to all at once, then SIGKILL to any still running after `grace`."""
    running = [p for p in processes if p is not None and p.poll() is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


PROFILE_RATE = 100  # py-spy's samples a second of each process profiled


def py_spy(
    pid: int, output: Path, duration: float, *, children: bool = True
) -> subprocess.Popen[bytes]:
    """py-spy (not a dependency: `pip install py-spy`) recording process `pid` (and its
    children: an api's workers; not an agent's replicas) for `duration` s, nonblocking,
    into `output` as collapsed stacks."""
    argv = ["py-spy", "record", "--pid", str(pid), "--nonblocking", "--gil"]
    argv += ["--subprocesses"] if children else []
    argv += ["--format", "raw", "--rate", str(PROFILE_RATE), "--duration", str(int(duration))]
    return subprocess.Popen(
        [*argv, "--output", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def open_sse(
    host: str, port: int, path: str, token: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A raw HTTP/1.1 SSE request, as a browser sends it: the reader after the status
    line, the writer, and the status line (the caller checks it: 200 or a refusal)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    return reader, writer, await reader.readline()
