# loop-detector for the scaled stack (docker-compose.yml): detector + enforcement API against a
# ClickHouse server. The store URL comes from LOOP_DETECTOR_CLICKHOUSE_URL, e.g.
#   http://user:password@clickhouse:8123
# Without it the process falls back to the embedded chDB store under /data.

# Build stage: the full image has a C compiler, so setup.py compiles the detection core with mypyc
# (LOOP_DETECTOR_COMPILE=1; a build that cannot compile fails). The wheel carries the DDL (clickhouse/) and the SDK.
FROM python:3.11 AS build
WORKDIR /src
# README.md* : the readme is optional at build time (the glob lets COPY succeed without it).
COPY pyproject.toml setup.py README.md* ./
COPY detector ./detector
COPY clickhouse ./clickhouse
COPY sdk/python ./sdk/python
RUN LOOP_DETECTOR_COMPILE=1 pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/loop-detector

COPY --from=build /wheels /wheels
# Exact versions of every runtime dependency (regenerated with pip freeze, see the file's header): the
# image installs what was tested, not whatever is newest on the day it is built.
COPY constraints.txt ./

RUN pip install -c constraints.txt /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --home-dir /data --no-create-home loop \
    && mkdir -p /data \
    && chown loop /data

USER loop
WORKDIR /data

# 8080: decisions / admin / metrics API; 4318 and 4317: the embedded OTLP/HTTP and OTLP/gRPC receivers.
EXPOSE 8080 4318 4317

# The data directory is the volume itself: tokens created at first start are /data/api-token and /data/admin-token.
CMD ["loop-detector", "serve", "--host", "0.0.0.0", "--data-dir", "/data"]
