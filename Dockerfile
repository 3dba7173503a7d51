# One image for every Cohort process: api, scheduler, agent (and the replicas it spawns).
# The agent container gets GPUs from compose; on a CPU host it uses CPU slots.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    TF_USE_LEGACY_KERAS=1 \
    COHORT_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY api ./api
COPY services ./services
COPY workers ./workers
COPY cli ./cli
COPY alembic ./alembic
RUN pip install . && useradd --create-home --uid 1000 cohort && mkdir -p /data \
    && chown cohort /data
USER cohort
VOLUME ["/data"]
EXPOSE 8000
CMD ["cohort", "api", "--host", "0.0.0.0"]
