#!/usr/bin/env bash
# CI for the Python package (issue 24), runnable on a fresh machine with Rust, a C compiler and
# Python 3.10+ (3.11 in CI; the wheel runs on 3.9+, but Pillow 13 needs 3.10): a venv under
# target/ with maturin, numpy, Pillow and pytest from PyPI, the abi3 wheel built and installed,
# cargo fmt --check and clippy -D warnings for this workspace (python/ is its own cargo
# workspace), then pytest. No torch: the tests that need it
# (return_tensors="pt", taps.record, the live comparison with upstream) skip themselves. Ray
# Data is installed (the Ray pipeline test runs it in a network namespace of its own, loopback only).
#
#   bash python/ci.sh            (from anywhere; PYTHON=python3.11 to pick the interpreter)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
start=$(date +%s)
step() { printf '\n=== python: %s (t+%ds)\n' "$1" "$(( $(date +%s) - start ))"; }

py="${PYTHON:-python3}"
venv="$root/target/python-ci/venv"
# the python workspace's own build directory (its dependency features differ from the root's).
# No --locked: python/Cargo.lock pins the registry crates, and cargo adds what a path crate
# (prep, reference, conformance) newly depends on without moving the existing pins.
export CARGO_TARGET_DIR="${GLM5V_PY_TARGET:-$root/target/python-ci/cargo}"

step "venv ($("$py" --version 2>&1))"
if [ ! -x "$venv/bin/python" ]; then "$py" -m venv "$venv"; fi
# Pillow is pinned to upstream's (the fixtures were made with 13.0.0): the PIL-image tests decode
# files with it and compare with upstream's bytes.
"$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2" numpy "pillow==13.0.0" pytest
# Ray Data (with pyarrow and pandas) for tests/test_ray.py: EmbedBatch in a real
# read_binary_files -> map_batches -> write_parquet pipeline on a local Ray instance (issue 37).
# Measured on the 2-core dev VM, ray 2.60.0: `time pip install "ray[data]"` into a fresh venv
# took 51 s (pip's cache cold; 47 s into this venv with the cache warm, ~0 s once installed);
# tests/test_ray.py took 12.6 s (the pipeline test 11.6 s: ray.init 3.5 s, the pipeline 5.2 s;
# 18.5 s while other builds loaded the machine). Nothing is cached by hand.
"$venv/bin/pip" install --quiet --disable-pip-version-check "ray[data]"

step "cargo fmt --check"
cargo fmt --manifest-path python/Cargo.toml --check

step "cargo clippy -D warnings (default features, then with the gpu feature)"
cargo clippy --manifest-path python/Cargo.toml --release --all-targets -- -D warnings
cargo clippy --manifest-path python/Cargo.toml --release --all-targets --features gpu -- -D warnings

step "wheel (maturin build --release) and install"
rm -rf "$root/target/python-ci/wheels"
"$venv/bin/maturin" build --release --manifest-path python/Cargo.toml \
    --interpreter "$venv/bin/python" --out "$root/target/python-ci/wheels" --quiet
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$root"/target/python-ci/wheels/glm5v-*.whl
"$venv/bin/python" -c "import glm5v; print('glm5v', glm5v.__version__, 'from', glm5v.__file__, '| JPEG SIMD:', glm5v.JPEG_SIMD)"

step "pytest"
# run from the tests folder against the installed wheel (not the source tree)
set +e
(cd "$here/tests" && "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs .)
rc=$?
set -e
if [ "$rc" = 5 ]; then
    echo "pytest collected no tests: python/tests is missing or broken"
    exit 1
fi
if [ "$rc" != 0 ]; then exit "$rc"; fi
step "done"
