"""The dashboard's sweep pages: the project's sweeps, and one sweep with its trials
(sortable by the objective), every trial's objective curve on one chart, and the best
trial's parameters and model. Built as every page is (api/routes/pages.py), from the same
views as REST `/api/v1/sweeps`.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Request
from fastapi.responses import Response

from api.deps import SessionDep, Viewer
from api.params import DbId
from api.routes.pages import (
    PAGE_SIZE,
    CursorQuery,
    cursor_before,
    not_found,
    page_router,
    render,
)
from services.exceptions import SweepNotFound
from services.jobs.store import encode_cursor
from services.models import ApiToken, Sweep
from services.statuses import TERMINAL_SWEEP_STATUSES
from services.sweeps import store as sweeps
from services.sweeps.schemas import SweepRead, TrialRead
from services.sweeps.store import read_trials
from services.sweeps.views import to_list_read, to_read
from services.telemetry.curves import read_curves

router = page_router()

# A chart of more lines than this is a blur: past it, the best trials' curves are drawn.
MAX_CURVES = 50
Sort = Literal["trial", "objective", "-objective"]  # objective: best first


def sort_trials(trials: list[TrialRead], sort: Sort, mode: str) -> list[TrialRead]:
    """Trials by index, or by objective value best first (`-objective`: worst first);
    trials without a value come last either way."""
    if sort == "trial":
        return sorted(trials, key=lambda t: t.index)
    worst_first = (sort == "-objective") == (mode == "max")  # ascending values
    valued = sorted(
        (t for t in trials if t.objective_value is not None),
        key=lambda t: (t.objective_value, t.index),
        reverse=not worst_first,
    )
    return valued + [t for t in trials if t.objective_value is None]


def _sweep_or_none(session: SessionDep, viewer: ApiToken, sweep_id: int) -> Sweep | None:
    try:
        return sweeps.read_sweep(session=session, project_id=viewer.project_id, sweep_id=sweep_id)
    except SweepNotFound:
        return None


def _sweep_context(session: SessionDep, sweep: Sweep, sort: Sort) -> dict[str, Any]:
    view: SweepRead = to_read(session=session, sweep=sweep)
    objective = view.objective
    trials = sort_trials(view.trials or [], sort, objective.mode)
    charted = [t.job_id for t in sort_trials(trials, "objective", objective.mode)[:MAX_CURVES]]
    jobs = [job for job in read_trials(session=session, sweep=sweep) if job.id in charted]
    curves = read_curves(
        session=session, jobs=jobs, name=objective.metric, replica=objective.replica
    )
    by_id = {t.job_id: t for t in trials}
    names = sorted({name for t in trials for name in t.parameters})
    return {
        "sweep": view,
        "trials": trials,
        "sort": sort,
        "parameter_names": names,
        "terminal": view.status in TERMINAL_SWEEP_STATUSES,
        "best": by_id.get(view.best_job_id) if view.best_job_id else None,
        "curves_cut": len(trials) > MAX_CURVES,
        "curves": [
            {
                "job_id": job_id,
                "label": f"trial {by_id[job_id].index} · #{job_id}",
                "best": job_id == view.best_job_id,
                "points": curves[job_id],
            }
            for job_id in charted
            if job_id in curves
        ],
    }


@router.get("/sweeps", response_model=None)
def sweeps_page(
    request: Request,
    session: SessionDep,
    viewer: Viewer,
    cursor: CursorQuery = None,
) -> Response:
    rows, next_before = sweeps.list_sweeps(
        session=session,
        project_id=viewer.project_id,
        before=cursor_before(cursor),
        limit=PAGE_SIZE,
    )
    return render(
        request,
        "sweeps.html",
        viewer,
        sweeps=to_list_read(session=session, sweeps=rows),
        next_cursor=encode_cursor(next_before) if next_before else None,
    )


@router.get("/sweeps/{sweep_id}", response_model=None)
def sweep_page(
    request: Request, session: SessionDep, viewer: Viewer, sweep_id: DbId, sort: Sort = "trial"
) -> Response:
    sweep = _sweep_or_none(session, viewer, sweep_id)
    if sweep is None:
        return not_found(request, viewer, "sweep", sweep_id)
    return render(request, "sweep.html", viewer, **_sweep_context(session, sweep, sort))


@router.get("/partials/sweeps/{sweep_id}", response_model=None)
def sweep_fragment(
    request: Request, session: SessionDep, viewer: Viewer, sweep_id: DbId, sort: Sort = "trial"
) -> Response:
    sweep = _sweep_or_none(session, viewer, sweep_id)
    if sweep is None:
        return Response(status_code=404)
    return render(request, "_sweep_live.html", viewer, **_sweep_context(session, sweep, sort))
