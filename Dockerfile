# flashattn: the extension built for the L4 (sm_89) and the H100 (sm_90a), the test suite, and
# the benchmark with its report. docs/docker.md has the details.
#
#   docker build -t flashattn:cu128 .
#   docker run --rm --gpus all -v "$PWD/results:/results" flashattn:cu128          # tests + benchmark
#   docker run --rm --gpus all flashattn:cu128 pytest -m h100 -x                   # any command
#
# One Dockerfile, two CUDA flavours, chosen before FROM; every step after FROM is the same for
# both (each checks itself against the base image's CUDA_VERSION):
#   CUDA 12.8 (default, the GPU runners):  docker build -t flashattn:cu128 .
#   CUDA 13.0:  docker build --build-arg CUDA_VERSION=13.0.2 -t flashattn:cu130 .
#               (torch 2.11.0 for CUDA 13.0 is also the package index's default torch 2.11.0:
#               --build-arg TORCH_INDEX_URL=https://pypi.org/simple)
#
# Behind a proxy that intercepts HTTPS, give the build its CA as a BuildKit secret; the network
# steps mount it (docker/retry.sh trusts it) and no layer keeps it:
#   docker build --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt ...
#
# Layers, from the least to the most often changed: system packages; Python dependencies (from
# pyproject.toml alone, so editing the sources does not reinstall them); the extension build
# (csrc/, flashattn/, setup.py); then tests, benchmarks, tools, lab (two CPU tests load its
# models) and the docker/ scripts, which do not rebuild the extension when they change.

ARG CUDA_VERSION=12.8.1
ARG BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04
FROM ${BASE_IMAGE}

# The last PyTorch release with CUDA 12.8 wheels is 2.11 (2.12 moved to CUDA 12.6/13.0/13.2).
ARG TORCH_VERSION=2.11.0
# Empty: PyTorch's index for the base image's CUDA (https://download.pytorch.org/whl/cu128 for
# 12.8.x, .../cu130 for 13.0.x).
ARG TORCH_INDEX_URL=
ARG PIP_VERSION=25.1.1
ARG NINJA_VERSION=1.13.0
ARG USER_UID=1000
# (Every RUN sees the ARGs declared above it, and a changed value re-runs them: the ARGs of the
# later layers are declared where they are used. CUDA_VERSION inside the image is the base
# image's own ENV, which NVIDIA's images set.)

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    MPLCONFIGDIR=/tmp/matplotlib \
    RESULTS_DIR=/results

# hadolint ignore=DL3008
RUN --mount=type=bind,source=docker/retry.sh,target=/tmp/retry.sh \
    --mount=type=secret,id=ca,mode=0444 \
    bash /tmp/retry.sh apt-get update \
 && bash /tmp/retry.sh apt-get install -y --no-install-recommends \
        python3 python3-dev python3-venv g++ tini ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid "${USER_UID}" --shell /bin/bash flashattn \
 && mkdir -p /opt/venv /opt/flashattn /results \
 && chown flashattn:flashattn /opt/venv /opt/flashattn \
 && chmod 1777 /results

USER ${USER_UID}
WORKDIR /opt/flashattn

# --- dependencies: rebuilt only when pyproject.toml (or the torch pin) changes ---------------
COPY --chown=flashattn:flashattn pyproject.toml ./
COPY --chown=flashattn:flashattn docker/pyproject_deps.py docker/
# torch must be built for the base image's CUDA (major.minor), or the build stops here.
RUN --mount=type=bind,source=docker/retry.sh,target=/tmp/retry.sh \
    --mount=type=secret,id=ca,mode=0444 \
    cuda_mm="${CUDA_VERSION%.*}" \
 && torch_index="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu${cuda_mm%.*}${cuda_mm#*.}}" \
 && python3 -m venv /opt/venv \
 && bash /tmp/retry.sh python -m pip install "pip==${PIP_VERSION}" \
 && bash /tmp/retry.sh python -m pip install --index-url "${torch_index}" "torch==${TORCH_VERSION}" \
 && python -c "import torch, sys; v = torch.version.cuda or ''; sys.exit(0 if v == '${cuda_mm}' else f'torch {torch.__version__} is built for CUDA {v!r}, not ${cuda_mm} (the base image has CUDA ${CUDA_VERSION})')" \
 && echo "torch==${TORCH_VERSION}" > /opt/venv/torch-constraint.txt \
 && bash /tmp/retry.sh python -m pip install "tomli==2.2.1; python_version < '3.11'" "ninja==${NINJA_VERSION}" \
 && python docker/pyproject_deps.py --extra test --extra report > /opt/venv/requirements.txt \
 && bash /tmp/retry.sh python -m pip install -c /opt/venv/torch-constraint.txt -r /opt/venv/requirements.txt

# --- the extension: rebuilt when the kernels, the package or setup.py change ------------------
# sm_89 (L4) and sm_90a (H100: the "a" enables the Hopper-only instructions).
ARG TORCH_CUDA_ARCH_LIST="8.9;9.0a"
ARG MAX_JOBS=4
COPY --chown=flashattn:flashattn setup.py ./
COPY --chown=flashattn:flashattn csrc/ csrc/
COPY --chown=flashattn:flashattn flashattn/ flashattn/
COPY --chown=flashattn:flashattn docker/check_build.sh docker/
ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} \
    FLASHATTN_BUILT_ARCHS=${TORCH_CUDA_ARCH_LIST}
# pyproject's `readme` must exist to build; an empty stand-in keeps README edits from rebuilding
# the kernels (the real one is copied below).
RUN touch README.md \
 && MAX_JOBS="${MAX_JOBS}" python -m pip install --no-build-isolation --no-deps -c /opt/venv/torch-constraint.txt -e . \
 && rm -rf build \
 && bash docker/check_build.sh "${TORCH_CUDA_ARCH_LIST}"

# --- what runs the suite and the benchmark: changing these does not rebuild the extension ------
COPY --chown=flashattn:flashattn conftest.py README.md ./
COPY --chown=flashattn:flashattn tests/ tests/
COPY --chown=flashattn:flashattn benchmarks/ benchmarks/
COPY --chown=flashattn:flashattn tools/ tools/
COPY --chown=flashattn:flashattn lab/ lab/
COPY --chown=flashattn:flashattn docker/ docker/
# Writable by any uid, for `docker run --user "$(id -u):$(id -g)"` (results owned by the caller).
RUN mkdir -m 1777 .pytest_cache .hypothesis

ARG FLASHATTN_REVISION=unknown
ENV FLASHATTN_REVISION=${FLASHATTN_REVISION}
LABEL org.opencontainers.image.title="flashattn" \
      org.opencontainers.image.description="flashattn CUDA attention kernels, their tests and benchmark" \
      org.opencontainers.image.revision="${FLASHATTN_REVISION}"

ENTRYPOINT ["/usr/bin/tini", "--", "/opt/flashattn/docker/entrypoint.sh"]
CMD []
