#!/usr/bin/env bash
# run_pip_install_test.sh: `pip install ./python` into a fresh virtual environment, then, from a
# folder with no manifest and with no tilerun environment variable, `import tilerun` and a NumPy
# call work, the library, manifest and cpu backend used are the package's own, and the type
# stubs are installed. Offline: the venv sees Debian's setuptools and wheel
# (--system-site-packages, --no-build-isolation, --no-index).
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
work="${TEST_TMPDIR}/pip"
rm -rf "$work" && mkdir -p "$work/src/python/tilerun" "$work/elsewhere"
cp "$root/python/setup.py" "$root/python/pyproject.toml" "$work/src/python/"
cp "$root"/python/tilerun/{__init__.py,__init__.pyi,_ext.pyi,py.typed,_ext.c,torch.py} "$work/src/python/tilerun/"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# With nothing built in the tree (its sources only: the version header) and no installed tilerun,
# the install fails saying what to build.
mkdir -p "$work/empty/include/tilerun"
cp "$root/include/tilerun/version.h" "$work/empty/include/tilerun/"
if TILERUN_TREE="$work/empty" PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= "$work/venv/bin/pip" install \
    --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check -q "$work/src/python" \
    >"$work/refused.log" 2>&1; then
  echo "FAIL: pip installed tilerun from a tree with nothing built" >&2
  exit 1
fi
grep -q "no built libtilerun.so under $work/empty" "$work/refused.log" &&
  grep -q "bazel build -c opt //python:libtilerun.so //backends/cpu:installed" "$work/refused.log" || {
  echo "FAIL: the refusal does not say what is missing and what to build:" >&2
  cat "$work/refused.log" >&2
  exit 1
}
# An editable install is refused with the reason (it would install a package without its files).
if TILERUN_TREE="$root" "$work/venv/bin/pip" install --no-build-isolation --no-index --no-cache-dir \
    --disable-pip-version-check -q -e "$work/src/python" >"$work/editable.log" 2>&1; then
  echo "FAIL: pip install -e succeeded" >&2
  exit 1
fi
grep -q "tilerun setup.py: editable installs (pip install -e) are not supported: the package bundles the library, the manifest and the CPU backend as built files; use pip install ./python (again after a change)" "$work/editable.log" || {
  echo "FAIL: the editable install's refusal does not say why:" >&2
  cat "$work/editable.log" >&2
  exit 1
}
TILERUN_TREE="$root" "$work/venv/bin/pip" install --no-build-isolation --no-index --no-cache-dir \
  --disable-pip-version-check -q "$work/src/python" >&2
# A sanitized build (--config=asan) needs its runtimes loaded first, as run_python_test.sh does.
preload=$(ldd "$root/python/libtilerun.so" | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
cd "$work/elsewhere"
env -i PATH=/usr/bin:/bin HOME="$work" ${preload:+LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0} \
  "$work/venv/bin/python" - "$work/venv" <<'PY'
import os
import sys

import numpy as np

import tilerun

venv = os.path.realpath(sys.argv[1])
pkg = os.path.dirname(os.path.realpath(tilerun.__file__))
assert pkg.startswith(venv), "tilerun imported from %s, not the venv %s" % (pkg, venv)
assert os.path.realpath(tilerun.library_path) == os.path.join(pkg, "lib", "libtilerun.so"), \
    tilerun.library_path
assert os.path.realpath(tilerun._ext.__file__).startswith(pkg), tilerun._ext.__file__
assert os.path.isfile(os.path.join(pkg, "__init__.pyi")) and os.path.isfile(os.path.join(pkg, "py.typed"))
assert not any(k.startswith("TILERUN_") for k in os.environ), "a TILERUN_ variable is set"
rt = tilerun.default_runtime()
assert os.path.realpath(rt.manifest_dir) == os.path.join(pkg, "share", "tilerun", "manifest"), \
    rt.manifest_dir
a = np.arange(6, dtype=np.float32).reshape(2, 3)
y = tilerun.op("AddFwdOp")(a, a)
np.testing.assert_array_equal(y, 2 * a)
rms = tilerun.op("RMSNormFwdOp", normalized_shape=(3,), eps=1e-6)
assert rms.target is None
rms(a, np.ones(3, np.float32))
assert rms.target == "cpu", rms.target
assert tilerun.__version__ != "unknown"
print("pip install test: tilerun %s from %s ran AddFwdOp on %s" % (tilerun.__version__, pkg, rms.target))
PY
