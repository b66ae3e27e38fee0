#!/usr/bin/env bash
# Builds nsys-cortex-neuron:latest without a registry: debootstrap, the
# agent, docker import (see docs/docker.md). Needs root and a Debian mirror.
# Arguments go to `nsys-cortex image build` (--test, --tag, --rebuild, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/nsys-cortex ] || make build
exec bin/nsys-cortex image build "$@"
