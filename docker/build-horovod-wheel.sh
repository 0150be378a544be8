#!/usr/bin/env bash
# Build a Horovod 0.28.1 wheel against the TensorFlow installed in $PYTHON's environment (tensorflow-cpu,
# or tensorflow with CUDA: then HOROVOD_GPU_OPERATIONS=NCCL in the environment builds the NCCL ops too),
# once per machine: the wheel is cached outside the repository and reused afterwards.
# Horovod 0.28.1 does not compile against TF 2.21 only in horovod/tensorflow/xla_mpi_ops.cc: its XLA
# custom calls (GPU-only, used only with HOROVOD_ENABLE_XLA_OPS=1) are left out of every build.
# Usage: build-horovod-wheel.sh PYTHON  -> prints the wheel's path
set -euo pipefail
PYTHON=${1:?usage: $0 PYTHON}
HVD_VERSION=0.28.1
version() { "$PYTHON" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null; }
TF_VERSION=$(version tensorflow-cpu || version tensorflow)
CACHE=${TFDIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist}/wheels/horovod-$HVD_VERSION-tf$TF_VERSION${HOROVOD_GPU_OPERATIONS:+-gpu}
wheel=$(ls "$CACHE"/horovod-*.whl 2>/dev/null | head -n1 || true)
if [ -n "$wheel" ]; then echo "$wheel"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m pip download -q --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$work" >&2
tar -xzf "$work/horovod-$HVD_VERSION.tar.gz" -C "$work"
src="$work/horovod-$HVD_VERSION"
"$PYTHON" - "$src/horovod/tensorflow/CMakeLists.txt" <<'PY'
import sys, pathlib
path = pathlib.Path(sys.argv[1])
line = 'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")'
text = path.read_text()
assert line in text, "unexpected Horovod source layout"
path.write_text(text.replace(line, "# " + line + "  (left out: does not compile against TF 2.21)"))
PY
export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
       HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
       MAKEFLAGS="-j$(nproc)"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$src" >&2
mkdir -p "$CACHE"
built=$(ls "$work"/dist/horovod-*.whl)
cp "$built" "$CACHE/.partial.whl" && mv "$CACHE/.partial.whl" "$CACHE/$(basename "$built")"  # never a half wheel
echo "$CACHE/$(basename "$built")"
