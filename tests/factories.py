"""Plain helpers that make test data through the services."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy.orm import Session

from services import auth, jobs
from services.models import ApiToken, Job
from services.schemas import JobCreate
from services.settings import get_settings


def create_token(session: Session, project: str = "default") -> tuple[str, ApiToken]:
    token = "test_" + secrets.token_hex(8)
    row = auth.ensure_token(session=session, token=token, project_name=project,
                            name="test", is_admin=False)
    return token, row


def create_job(session: Session, project_id: int, **spec: Any) -> Job:
    job, _ = jobs.create_job(session=session, project_id=project_id,
                             job_in=JobCreate.model_validate(spec), settings=get_settings())
    return job
