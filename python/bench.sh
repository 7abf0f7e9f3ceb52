#!/usr/bin/env bash
# `cargo xtask bench python`: glm5v's ImageProcessor against upstream's Glm5NextImageProcessor in
# one Python process (python -m glm5v.bench; its options pass through, e.g. --reps 15 --batch 64).
#
# Builds the wheel as python/ci.sh does (a build venv under target/python-ci/, maturin from PyPI),
# unpacks it under target/python-bench/site, and runs the bench with the fixture venv's Python
# ($GLM5V_VENV, else /work/venv: torch 2.15.0, transformers 5.23.0) so that both sides run in
# the same process; without that venv it times ours alone with the build venv's Python.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
venv="$root/target/python-ci/venv"
export CARGO_TARGET_DIR="${GLM5V_PY_TARGET:-$root/target/python-ci/cargo}"
if [ ! -x "$venv/bin/python" ]; then "$py" -m venv "$venv"; fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2" numpy "pillow==13.0.0"
wheels="$root/target/python-bench/wheels"
rm -rf "$wheels" "$root/target/python-bench/site"
"$venv/bin/maturin" build --release --manifest-path python/Cargo.toml \
    --interpreter "$venv/bin/python" --out "$wheels" --quiet
"$venv/bin/python" - "$wheels" "$root/target/python-bench/site" <<'PY'
import glob, sys, zipfile
zipfile.ZipFile(sorted(glob.glob(sys.argv[1] + "/glm5v-*.whl"))[-1]).extractall(sys.argv[2])
PY
up="${GLM5V_VENV:-/work/venv}/bin/python"
if [ -x "$up" ] && "$up" -c "import torch, transformers" 2>/dev/null; then
    runner="$up"
else
    echo "bench python: no venv with torch and transformers (\$GLM5V_VENV or /work/venv): ours alone" >&2
    runner="$venv/bin/python"
fi
PYTHONPATH="$root/target/python-bench/site" exec "$runner" -m glm5v.bench "$@"
