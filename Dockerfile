# One image for every Stowage component: `stowage extender | operator | node-monitor`.
#
#   docker build -t stowage:0.1.0 .          # or: podman build -t stowage:0.1.0 .
#
# Runtime dependencies only: the wheel is installed without extras, so the simulator's plotting and
# progress-bar dependencies (the `sim` extra: matplotlib, tqdm) and the test tools stay out.
# tests/chart/test_image.py installs the same wheel into a clean virtualenv and starts every component.

# --- build: a wheel of Stowage and of each of its dependencies --------------------------------
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY stowage/ stowage/
COPY extender/ extender/
COPY node-monitor/ node-monitor/
COPY operator/ operator/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# --- runtime ----------------------------------------------------------------------------------
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Installed from the wheels built above only (--no-index): what runs is what was built.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/stowage-*.whl \
    && groupadd --system --gid 65532 stowage \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin stowage
# Numeric, so Kubernetes can verify runAsNonRoot.
USER 65532:65532
WORKDIR /tmp
# Node monitor metrics, extender, operator webhook, operator metrics.
EXPOSE 9808 8888 9443 8080
ENTRYPOINT ["stowage"]
CMD ["--help"]
