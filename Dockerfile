# torchgate: one image for `torchgate webhook`, `torchgate controller` and `torchgate certs`.
#
# Two stages, so the runtime image holds no compiler, no build backend and no source tree:
#   builder  builds the torchgate wheel and collects wheels of every dependency;
#   runtime  installs those wheels offline (--no-index), then drops pip itself.
# All of torchgate's dependencies (aiohttp, cryptography, orjson, pybase64, PyYAML, ...) publish
# manylinux wheels for CPython 3.11, so the slim base needs no build tools in either stage.
#
# The runtime runs as an unprivileged numeric user (65532, "nonroot" by convention, so
# `runAsNonRoot` can be verified without /etc/passwd) and never writes to its root filesystem:
# bytecode is compiled at install time and PYTHONDONTWRITEBYTECODE stops writes at run time;
# HOME and TMPDIR point at /tmp, which the manifests mount as an emptyDir.
#
# Build (BuildKit, the default since Docker 23): docker build -t torchgate:dev .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# Only what the wheel is made of (.dockerignore keeps the rest out of the context as well).
COPY pyproject.toml README.md ./
COPY torchgate/ torchgate/
# `pip wheel .` builds torchgate's wheel and downloads a wheel for every dependency into /wheels.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="torchgate" \
      org.opencontainers.image.description="Admission webhook, placement policies and gang controller for Kubeflow PyTorchJobs" \
      org.opencontainers.image.licenses="Apache-2.0"
# The wheels are bind-mounted from the builder, so they never become a layer of this image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/torchgate-*.whl \
    && pip uninstall --yes pip setuptools wheel
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
WORKDIR /tmp
USER 65532:65532
# 8443: webhook (TLS); 8080: controller metrics and health (plain HTTP).
EXPOSE 8443 8080
ENTRYPOINT ["torchgate"]
CMD ["--help"]
