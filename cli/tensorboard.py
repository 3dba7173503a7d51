"""`cohort tensorboard JOB [JOB ...]`: the jobs' TensorBoard files, fetched from Cohort's API,
in a TensorBoard started here.

The files (scalars, histograms, profiles: each replica's $COHORT_TENSORBOARD_DIR, which
its agent copies to the artifact store while it runs) are fetched into a local directory,
one TensorBoard run per job and replica (`job-7/replica-0`), while TensorBoard starts;
then its address is printed. While a job runs they are fetched again every `--every`
seconds, only what changed (cli/board_fetch.py), and once more after it ends. Ctrl-C
stops TensorBoard and exits 0.

TensorBoard is the `tensorboard` package (TensorFlow's own), run as a child process: from
this interpreter if it has the package, else the `tensorboard` program on PATH.
It listens on localhost unless `--bind-all`: it has no login, and whoever reaches it
reads every file fetched, which this command needed a token to read.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import IO, Annotated

import httpx
import typer
from rich.markup import escape

from cli.board_fetch import BoardFetcher, BoardSource, Fetched, is_final
from cli.options import JsonOpt, TokenOpt, UrlOpt, connect, console, emit_json, err, guarded
from cohort.errors import ApiError

START_TIMEOUT = 120.0  # seconds TensorBoard may take to listen (it imports TensorFlow)
STOP_TIMEOUT = 10.0  # seconds it may take to stop before it is killed
INSTALL_HINT = "pip install tensorboard==2.21.0 (TensorFlow's own; cohort[worker] has it)"
# TensorBoard's line once it listens: "TensorBoard 2.21.0 at http://localhost:6006/ (...)"
_SERVING = re.compile(r"^TensorBoard \S+ at (https?://\S+)")

JobsArg = Annotated[list[int], typer.Argument(help="job ids", metavar="JOB", show_default=False)]
PortOpt = Annotated[
    int | None,
    typer.Option(min=1, max=65535, help="TensorBoard's port (default: 6006, or the next free one)"),
]
LogdirOpt = Annotated[
    Path | None,
    typer.Option(
        file_okay=False,
        help="where the files go, kept: a later run fetches only what changed "
        "(default: a temporary directory, removed at exit)",
    ),
]
EveryOpt = Annotated[
    float, typer.Option(min=1.0, help="seconds between two fetches while a job runs")
]
BindAllOpt = Annotated[
    bool,
    typer.Option(
        "--bind-all",
        help="serve on every network interface, not only localhost (TensorBoard has no "
        "login: whoever reaches the port reads the jobs' files)",
    ),
]
NoServeOpt = Annotated[
    bool,
    typer.Option("--no-serve", help="fetch the files into --logdir and exit: no TensorBoard"),
]


def tensorboard(
    job_ids: JobsArg,
    port: PortOpt = None,
    logdir: LogdirOpt = None,
    every: EveryOpt = 10.0,
    bind_all: BindAllOpt = False,
    no_serve: NoServeOpt = False,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Open jobs in TensorBoard: their event files and profiles, fetched as they grow."""
    if no_serve and logdir is None:
        raise typer.BadParameter("--no-serve needs --logdir: where to keep the files")
    source = BoardSource(connect(url, token))
    statuses = {job: guarded(partial(source.status, job)) for job in job_ids}
    argv = None if no_serve else tensorboard_argv()
    if argv is not None:
        _sigterm_as_interrupt()  # from here on: the directory it makes is removed
    temporary = logdir is None
    root = Path(tempfile.mkdtemp(prefix="cohort-tensorboard-")) if logdir is None else logdir
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    fetcher = BoardFetcher(source, root)
    try:
        if argv is None:
            fetched = {job: guarded(partial(fetcher.fetch, job)) for job in job_ids}
            _said_refused(fetched)
            _report_fetch(root, statuses, fetched, as_json)
            return
        _serve(argv, _board_args(root, port, bind_all), fetcher, statuses, every, as_json)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def tensorboard_argv() -> list[str]:
    """The command that runs TensorBoard here; exits 2 saying how to install it if none."""
    if importlib.util.find_spec("tensorboard") is not None:
        return [sys.executable, "-m", "tensorboard.main"]
    program = shutil.which("tensorboard")
    if program is None:
        err.print(f"[red]TensorBoard is not installed here[/]: {escape(INSTALL_HINT)}")
        raise typer.Exit(2)
    return [program]


def _board_args(root: Path, port: int | None, bind_all: bool) -> list[str]:
    args = ["--logdir", str(root)]
    if port is not None:
        args += ["--port", str(port)]
    return args + (["--bind_all"] if bind_all else [])


def _sigterm_as_interrupt() -> None:
    """A SIGTERM stops it as Ctrl-C does: TensorBoard stopped, the directory removed."""

    def handler(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _serve(
    argv: list[str],
    args: list[str],
    fetcher: BoardFetcher,
    statuses: dict[int, str],
    every: float,
    as_json: bool,
) -> None:
    """Start TensorBoard, fetch while it starts, say where it is, follow the running jobs
    until Ctrl-C."""
    board = Board(argv + args)
    try:
        follow = Following(fetcher, statuses)
        guarded(lambda: follow.round(check_status=False, tolerant=False))
        address = board.wait_address(START_TIMEOUT)
        if as_json:
            emit_json({"url": address, "logdir": str(fetcher.tree.root), "jobs": statuses})
        else:
            jobs = ", ".join(f"job {job} ({status})" for job, status in statuses.items())
            console.print(f"TensorBoard at {address} : {jobs}", soft_wrap=True)
            console.print(f"files in {fetcher.tree.root}; Ctrl-C stops it", soft_wrap=True)
        while follow.jobs and board.running():
            time.sleep(every)
            follow.round()
        if not follow.jobs and not as_json:
            err.print("every job has ended: all of their files are here")
        board.wait()
        err.print(f"[red]TensorBoard stopped[/] (exit {board.process.returncode}):")
        board.say_output()
        raise typer.Exit(1)
    except KeyboardInterrupt:
        if not as_json:
            err.print("stopping TensorBoard")
    finally:
        board.stop(STOP_TIMEOUT)


class Following:
    """The jobs whose files may still change, fetched a round at a time. A job is
    followed until a round after the one that found it ended: its replicas' last files
    reach the store as each exits, which for a gang's workers may be after its chief
    ended the job."""

    def __init__(self, fetcher: BoardFetcher, statuses: dict[int, str]) -> None:
        self.fetcher, self.statuses = fetcher, statuses
        self.jobs = set(statuses)
        self._ended: set[int] = set()

    def round(self, *, check_status: bool = True, tolerant: bool = True) -> None:
        """Fetch what is new of each job followed (its status read first). `tolerant`: an
        API error is said and the next round tries again; else it is raised."""
        for job in sorted(self.jobs):
            try:
                if check_status:
                    self.statuses[job] = self.fetcher.source.status(job)
                fetched = self.fetcher.fetch(job)
            except (ApiError, httpx.TransportError) as exc:
                if not tolerant:
                    raise
                err.print(f"[yellow]job {job}: {escape(str(exc))}[/] (trying again in a moment)")
                continue
            _said_refused({job: fetched})
            if is_final(self.statuses[job]):
                if job in self._ended:
                    self.jobs.discard(job)
                self._ended.add(job)


def _said_refused(fetched: dict[int, Fetched]) -> None:
    for job, done in fetched.items():
        for why in done.refused:
            err.print(f"[yellow]job {job}: not written:[/] {escape(why)}", soft_wrap=True)


def _report_fetch(
    root: Path, statuses: dict[int, str], fetched: dict[int, Fetched], as_json: bool
) -> None:
    rows = [
        {
            "id": job,
            "status": statuses[job],
            "files": done.files,
            "downloaded": len(done.downloaded),
            "appended": len(done.appended),
            "refused": len(done.refused),
        }
        for job, done in fetched.items()
    ]
    if as_json:
        emit_json({"logdir": str(root), "jobs": rows})
        return
    for row in rows:
        console.print(
            f"job {row['id']} ({row['status']}): {row['files']} files, "
            f"{row['downloaded']} fetched whole, {row['appended']} grown"
        )
    console.print(f"in {root}: tensorboard --logdir {root}", soft_wrap=True)


class Board:
    """TensorBoard's process: its address once it listens, its last lines of output."""

    def __init__(self, argv: list[str]) -> None:
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up talk
        # In this process group: Ctrl-C in a terminal reaches it too.
        self.argv = argv
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self._lines: deque[str] = deque(maxlen=12)
        self._address: queue.Queue[str | None] = queue.Queue()
        self._relay = False  # past its address, its lines go to stderr
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes] | None) -> None:
        assert stream is not None
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if self._relay:
                err.print(line, markup=False, highlight=False, soft_wrap=True)
            self._lines.append(line)
            found = _SERVING.match(line)
            if found and not self._relay:
                self._relay = True
                self._address.put(found.group(1))
        self._address.put(None)  # it closed its output: it ended

    def wait_address(self, timeout: float) -> str:
        """Its address once it listens; exits 1 with its output if it ends or takes longer."""
        try:
            address = self._address.get(timeout=timeout)
        except queue.Empty:
            address = None
        if address is None:
            err.print(f"[red]TensorBoard did not start[/] ({escape(' '.join(self.argv))}):")
            self.say_output()
            raise typer.Exit(1)
        return address

    def say_output(self) -> None:
        """Its last lines, on stderr as it wrote them (why it stopped is the last)."""
        err.print("\n".join(self._lines), markup=False, highlight=False, soft_wrap=True)

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self) -> None:
        self.process.wait()

    def stop(self, timeout: float) -> None:
        """Stop it (SIGTERM, then SIGKILL after `timeout`) and reap it."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
