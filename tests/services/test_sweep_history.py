"""The trial rows a pass that creates trials reads (services/sweeps/history.py
`read_created_rows`): every row's columns for the studies, and as `SweepTrial`s, which the
pass writes, only the rows of trials not created yet (parameters fixed ahead)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.models import Sweep, SweepTrial
from services.settings import get_settings
from services.sweeps import advance
from services.sweeps.history import RowColumns, read_created_rows
from services.sweeps.schemas import SweepCreate
from services.sweeps.store import create_sweep
from tests.factories import create_token


def _sweep(session: Session, project_id: int, name: str) -> int:
    spec = {
        "name": name,
        "template": {"trainer": "mlp_digits", "strategy": "one_device", "replicas": 1},
        "space": {"grid": {"learning_rate": [0.1, 0.01, 0.001]}},
        "max_concurrent": 1,
        "objective": {"metric": "accuracy", "mode": "max"},
    }
    return create_sweep(
        session=session,
        project_id=project_id,
        sweep_in=SweepCreate.model_validate(spec),
        settings=get_settings(),
    ).id


def test_rows_of_created_trials_are_read_as_columns_and_rows_ahead_as_sweep_trials(
    session: Session,
) -> None:
    _, token = create_token(session)
    ahead_id = _sweep(session, token.project_id, "ahead")
    plain_id = _sweep(session, token.project_id, "plain")
    for index, rate in enumerate([0.001, 0.1, 0.01]):
        session.add(
            SweepTrial(
                sweep_id=ahead_id,
                trial_index=index,
                parameters={"learning_rate": rate},
                system_attrs={"fixed": index},
            )
        )
    session.flush()
    result = advance.advance_sweeps(session=session, settings=get_settings())
    assert len(result.created) == 2  # trial 0 of each sweep
    ahead_row = session.get(SweepTrial, (ahead_id, 0))
    assert ahead_row is not None and ahead_row.parameters == {"learning_rate": 0.001}
    assert ahead_row.system_attrs != {"fixed": 0}  # the fixed-ahead row was written to
    sweeps = [session.get_one(Sweep, ahead_id), session.get_one(Sweep, plain_id)]
    assert [s.trials_created for s in sweeps] == [1, 1]
    found, ahead = read_created_rows(session=session, sweeps=sweeps)
    assert found[ahead_id] == {
        0: RowColumns({"learning_rate": 0.001}, ahead_row.system_attrs),
        1: RowColumns({"learning_rate": 0.1}, {"fixed": 1}),
        2: RowColumns({"learning_rate": 0.01}, {"fixed": 2}),
    }
    assert list(found[plain_id]) == [0]
    # Only rows of trials not created yet, and the session's own objects.
    assert ahead == {
        ahead_id: {i: session.get(SweepTrial, (ahead_id, i)) for i in (1, 2)},
        plain_id: {},
    }
    assert read_created_rows(session=session, sweeps=[]) == ({}, {})
