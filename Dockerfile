# Cohort's images, one target each (docker build --target NAME):
#   control     api, scheduler and migrate: no TensorFlow            (the default, last)
#   worker      a node agent and the replicas it spawns: TensorFlow CPU
#   gpu-worker  the same on tensorflow[and-cuda] (CUDA from wheels; the driver comes from
#               the host through the NVIDIA container toolkit)
# Dependencies are installed from pyproject.toml alone, in layers built before any source
# is copied: a code change rebuilds only the small layer that installs Cohort's own wheel.
# Each image grows from its dependency stage rather than copying the virtualenv out of it,
# so that rebuild neither re-copies nor re-hashes the virtualenv (2.4 GB in worker).
# The base is pinned by tag and by the digest of its multi-architecture index; `make
# images` passes another (PYTHON_IMAGE) only where that one cannot be pulled.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/cohort/bin:$PATH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# -- the service user, under every image ------------------------------------------------
# The data directory (bundle cache, replica working directories, logs) belongs to the
# service user; its uid is fixed so volumes keep their owner across image versions.
FROM base AS runtime
RUN groupadd --gid 10001 cohort \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /data cohort \
    && mkdir -p /data && chown 10001:10001 /data
ENV COHORT_DATA_DIR=/data

# -- dependencies: one virtualenv per image, from the pins of pyproject.toml ---------------
# Each stage's pip is its virtualenv's: the slim base has a `pip` on PATH, a base of
# Debian's packages has the system's at most (which PEP 668 keeps from installing).
FROM runtime AS deps-control
WORKDIR /build
COPY pyproject.toml deploy/requirements.py ./
RUN python -m venv /opt/cohort \
    && python requirements.py pyproject.toml > requirements.txt \
    && /opt/cohort/bin/python -m pip install --no-cache-dir -r requirements.txt

FROM deps-control AS deps-worker
RUN python requirements.py pyproject.toml worker > requirements-worker.txt \
    && /opt/cohort/bin/python -m pip install --no-cache-dir -r requirements-worker.txt

FROM deps-control AS deps-gpu
RUN python requirements.py pyproject.toml gpu > requirements-gpu.txt \
    && /opt/cohort/bin/python -m pip install --no-cache-dir -r requirements-gpu.txt

# -- Cohort itself, as a wheel (migrations, templates and assets inside) ------------------
FROM base AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY alembic ./alembic
COPY api ./api
COPY services ./services
COPY workers ./workers
COPY cli ./cli
COPY cohort ./cohort
RUN python -m venv /opt/build \
    && /opt/build/bin/python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# -- the images: a dependency stage, then Cohort's wheel, run as the service user ---------
FROM deps-worker AS worker
ENV TF_USE_LEGACY_KERAS=1
COPY --from=wheel /dist /dist
RUN /opt/cohort/bin/python -m pip install --no-cache-dir --no-deps /dist/cohort-*.whl \
    && rm -rf /dist
WORKDIR /data
VOLUME ["/data"]
# The agent runs as root in its container, and only the agent: it starts each job's
# replicas as a uid of the job's own (workers/node/isolation.py), so a replica can read
# neither another job's files nor the agent's environment (its Redis password, node key
# and the store's keys). Were the agent the service user, its replicas would share its uid
# and could read all of that through /proc. README, "Running with containers".
# hadolint ignore=DL3002
USER 0:0
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 \
    CMD ["cohort", "health", "agent"]
CMD ["cohort", "agent"]

FROM deps-gpu AS gpu-worker
ENV TF_USE_LEGACY_KERAS=1 \
    CUDA_DEVICE_ORDER=PCI_BUS_ID \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=wheel /dist /dist
RUN /opt/cohort/bin/python -m pip install --no-cache-dir --no-deps /dist/cohort-*.whl \
    && rm -rf /dist
WORKDIR /data
VOLUME ["/data"]
# As worker: the agent is root so that its replicas are not (see there).
# hadolint ignore=DL3002
USER 0:0
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 \
    CMD ["cohort", "health", "agent"]
CMD ["cohort", "agent"]

# Last, so a plain `docker build .` makes it. `cohort migrate`, `cohort scheduler` and
# `cohort api` all run from it; the HEALTHCHECK is the api's (compose sets the others').
FROM deps-control AS control
COPY --from=wheel /dist /dist
RUN /opt/cohort/bin/python -m pip install --no-cache-dir --no-deps /dist/cohort-*.whl \
    && rm -rf /dist
WORKDIR /data
VOLUME ["/data"]
USER 10001:10001
# The address in settings, not flags: `cohort health api` reads the same settings.
ENV COHORT_API_HOST=0.0.0.0 \
    COHORT_API_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["cohort", "health", "api"]
CMD ["cohort", "api"]
