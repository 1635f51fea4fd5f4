#!/bin/sh
# `pip install --no-build-isolation .` of a copy of the source tree into a clean virtual
# environment (Debian's numpy and torch visible through --system-site-packages), then
# `import aps, aps.torch` from it; and `pip wheel --no-build-isolation .`, whose wheel must hold
# the C++ core, the stubs and py.typed. A real build of the target aps_python (CUDA off), in a
# temporary directory; prints how long each part took.
#   tests/python/pip_install_check.sh SOURCE_DIR [PYTHON]
set -eu
src=$(cd "$1" && pwd)
python=${2:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH APS_CMAKE_BUILD_DIR  # nothing from the build tree: only what pip installed

# The tracked tree's copy without build folders or VCS metadata (a pip build writes build/).
mkdir "$tmp/src"
tar -C "$src" --exclude=./.git --exclude='./build*' --exclude=./runs --exclude=./out --exclude='*.egg-info' \
  -cf - . | tar -C "$tmp/src" -xf -

"$python" -m venv --system-site-packages "$tmp/venv"
pip() { "$tmp/venv/bin/python" -m pip --disable-pip-version-check --no-input "$@"; }

start=$(date +%s)
pip install --no-build-isolation --no-index "$tmp/src" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
installed=$(date +%s)
echo "pip install: $((installed - start)) s"

cd "$tmp"  # away from the sources: the import must find the installed package
"$tmp/venv/bin/python" - "$tmp/venv" "$src" <<'PY'
import os
import re
import sys

import aps
import aps.torch
import numpy as np
import torch

venv, src = sys.argv[1], sys.argv[2]
where = os.path.dirname(os.path.realpath(aps.__file__))
assert where.startswith(os.path.realpath(venv)), f"aps imported from {where}, not the venv"
assert os.path.realpath(aps._aps.__file__).startswith(where), aps._aps.__file__
for name in ("_aps.pyi", "py.typed", "torch.py"):
    assert os.path.isfile(os.path.join(where, name)), f"{name} is not installed"
with open(os.path.join(src, "CMakeLists.txt")) as f:
    assert aps.__version__ == re.search(r"project\(aps VERSION ([0-9.]+)", f.read()).group(1), aps.__version__
assert aps.quantize(np.array([0.3, 1.7], np.float32), "e4m3").tolist() == [0.3125, 1.75]
y = aps.torch.fake_quantize(torch.tensor([0.3, 1.7], dtype=torch.bfloat16), "e4m3")
assert y.dtype == torch.bfloat16 and y.tolist() == [0.3125, 1.75], y
print(f"import aps, aps.torch: ok, aps {aps.__version__} from {where}")
PY

start=$(date +%s)
pip wheel --no-build-isolation --no-index --no-deps -w "$tmp/wheels" "$tmp/src" >"$tmp/wheel.log" 2>&1 || {
  cat "$tmp/wheel.log"
  exit 1
}
echo "pip wheel (the same build folder, built again incrementally): $(($(date +%s) - start)) s"
"$tmp/venv/bin/python" - "$tmp/wheels" <<'PY'
import glob
import sys
import zipfile

wheels = glob.glob(sys.argv[1] + "/aps-*.whl")
assert len(wheels) == 1, wheels
names = zipfile.ZipFile(wheels[0]).namelist()
for pattern in ("aps/__init__.py", "aps/torch.py", "aps/_aps.pyi", "aps/py.typed", "aps/_aps.cpython"):
    assert any(n.startswith(pattern) for n in names), f"{wheels[0]} misses {pattern}: {names}"
print("pip wheel: ok,", wheels[0].rsplit("/", 1)[1])
PY
