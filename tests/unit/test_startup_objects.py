"""A service's startup objects leave the cycle collector's full collections
(services/startup_objects.py): the api's lifespan and the scheduler's start freeze them,
once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> str:
    """`code` in a fresh interpreter (a freeze is for the whole process: not this one's)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_the_first_call_collects_then_freezes_and_later_ones_do_nothing() -> None:
    out = run(
        """
        import gc, weakref
        from services.startup_objects import freeze_startup_objects

        class Cycle:
            pass

        kept = [Cycle() for _ in range(1000)]
        # Made last: no automatic collection comes before the call; only it frees this.
        garbage = Cycle(); garbage.me = garbage
        gone = weakref.ref(garbage); del garbage
        first = freeze_startup_objects()
        frozen = gc.get_freeze_count()
        again = freeze_startup_objects()
        print(first, again, frozen >= 1000, gc.get_freeze_count() == frozen, gone() is None)
        """
    )
    # Frozen once, with the startup garbage collected first (not kept for good).
    assert out == "True False True True True", out


def test_the_api_freezes_what_it_built_before_it_serves(tmp_path: Path) -> None:
    out = run(
        f"""
        import gc, os
        os.environ["COHORT_DATABASE_URL"] = "sqlite:///{tmp_path / "api.db"}"
        os.environ["COHORT_DATA_DIR"] = "{tmp_path}"
        from fastapi.testclient import TestClient
        from api.main import app
        before = gc.get_freeze_count()
        with TestClient(app):
            pass
        print(before == 0, gc.get_freeze_count() > 50_000)
        """
    )
    assert out == "True True", out


def test_the_scheduler_freezes_what_it_built_before_its_loop(tmp_path: Path) -> None:
    out = run(
        f"""
        import gc, os
        os.environ["COHORT_DATABASE_URL"] = "sqlite:///{tmp_path / "scheduler.db"}"
        os.environ["COHORT_DATA_DIR"] = "{tmp_path}"
        os.environ["COHORT_SIGNING_KEY"] = "k" * 32
        from workers.control import scheduler
        # Its loop, replaced by what the loop would find: the objects frozen by then.
        found = []
        scheduler.Scheduler.run = lambda self: found.append(gc.get_freeze_count())
        before = gc.get_freeze_count()
        scheduler.run_scheduler()
        print(before == 0, found[0])
        """
    )
    first, frozen = out.split()
    assert first == "True" and int(frozen) > 50_000, out
