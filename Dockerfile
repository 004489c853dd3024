# syntax=docker/dockerfile:1
#
# fpga-slot: one image for the node agent (`fpga-agent run`, the DaemonSet) and the
# scheduler extender (`fpga-agent extender`, the Deployment).
#
#   docker build -t fpga-slot:0.1.0 .
#
# Two stages: the first builds the project's wheel and the wheels of everything it
# depends on and installs them into a virtual environment, /opt/fpga-slot; the second
# copies that environment into a slim Python and keeps nothing else: no compiler, no
# build frontend, no pip, no source tree.
# A COPY from the build stage is cached by its content, so a changed package always
# reaches the image (a RUN that only bind-mounts the wheels is cached by its command
# line, and kept installing the previous build's package).
#
# User: the image runs as an unprivileged user (65532) by default, which is all the
# extender needs. The agent cannot: it opens the kubelet's root-only sockets, the
# FPGAs' device nodes and sysfs attributes, so its DaemonSet sets runAsUser: 0 and
# privileged (daemonset/agent-daemonset.yaml says why).

ARG PYTHON_VERSION=3.11

# ----------------------------------------------------------------------------- build
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY agent ./agent
# The project's wheel and one wheel for each dependency
# (grpcio and protobuf come as binary wheels for this platform: nothing else is compiled).
RUN python -m pip wheel --wheel-dir /wheels . \
 && ls /wheels/fpga_slot-*.whl \
 && python -m venv /opt/fpga-slot \
 && /opt/fpga-slot/bin/python -m pip install --no-index --find-links /wheels fpga-slot \
 && /opt/fpga-slot/bin/python -m pip uninstall -y pip setuptools wheel

# ---------------------------------------------------------------------------- runtime
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# libudev1: pyudev loads it at run time (discovery and the hot-plug monitor).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libudev1 \
 && rm -rf /var/lib/apt/lists/*
# No installer in the image (the environment below has none either).
RUN python -m pip uninstall -y pip setuptools wheel
# What the build stage installed: the package and its dependencies, from the built
# wheels only (the environment's python is the base image's, at the same path).
COPY --from=build /opt/fpga-slot /opt/fpga-slot
ENV PATH=/opt/fpga-slot/bin:$PATH
RUN fpga-agent --help > /dev/null
USER 65532:65532
ENTRYPOINT ["fpga-agent"]
CMD ["run"]
