"""setup.py: the tilerun Python package, for `pip install ./python`.

It compiles the call path in C (tilerun/_ext.c, CPython's limited API: one wheel for CPython 3.11
and later) and brings, inside the package, a tilerun laid out as an install prefix:

    tilerun/lib/libtilerun.so                      the runtime
    tilerun/lib/tilerun/backends/cpu.yaml, libtilerun_cpu.so   the cpu backend
    tilerun/share/tilerun/manifest/*.yaml          the manifest

so the runtime finds its manifest and backends with no environment variable. The files come from
a built source tree: $TILERUN_TREE (files at their repository paths, built ones there or under
bazel-bin/), else the repository this file is in; build them first with
    bazel build -c opt //python:libtilerun.so //backends/cpu:installed
With no built library there, an installed tilerun is used instead (pkg-config's `tilerun`, as
tools/install.sh installs it): the package then loads <prefix>/lib/libtilerun.so.
"""
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.abspath(os.environ.get("TILERUN_TREE") or os.path.join(HERE, os.pardir))


def built(rel):
    """The path of built file `rel` (a repository path) in the tree, or None."""
    for base in (TREE, os.path.join(TREE, "bazel-bin")):
        p = os.path.join(base, rel)
        if os.path.isfile(p):
            return p
    return None


def version():
    for base in (TREE, HERE):
        p = os.path.join(base, "include", "tilerun", "version.h")
        if os.path.isfile(p):
            with open(p) as f:
                m = re.search(r'#define TILERUN_VERSION "([^"]+)"', f.read())
            if m:
                return m.group(1)
    raise SystemExit("tilerun setup.py: include/tilerun/version.h not found under %s" % TREE)


def installed_prefix():
    try:
        r = subprocess.run(["pkg-config", "--variable=prefix", "tilerun"], capture_output=True,
                           text=True, check=False)
    except OSError:
        return None
    prefix = r.stdout.strip()
    if r.returncode == 0 and prefix and os.path.isfile(os.path.join(prefix, "lib", "libtilerun.so")):
        return prefix
    return None


def bundle():
    """[(source, destination under the package)] of what the package brings, and the installed
    prefix it uses instead (None when it brings its own)."""
    lib = built("python/libtilerun.so")
    if lib is None:
        prefix = installed_prefix()
        if prefix is None:
            raise SystemExit(
                "tilerun setup.py: no built libtilerun.so under %s (or its bazel-bin/) and no "
                "installed tilerun (pkg-config tilerun). Build it first:\n"
                "  bazel build -c opt //python:libtilerun.so //backends/cpu:installed\n"
                "or install tilerun with tools/install.sh, or point TILERUN_TREE at a built tree."
                % TREE)
        return [], prefix
    files = [(lib, "lib/libtilerun.so")]
    for name in ("cpu.yaml", "libtilerun_cpu.so"):
        p = built("backends/cpu/" + name)
        if p is None:
            raise SystemExit("tilerun setup.py: backends/cpu/%s is not built under %s (bazel build "
                             "-c opt //backends/cpu:installed)" % (name, TREE))
        files.append((p, "lib/tilerun/backends/" + name))
    spec = os.path.join(TREE, "manifest", "spec")
    yamls = sorted(f for f in os.listdir(spec) if f.endswith(".yaml")) if os.path.isdir(spec) else []
    if not yamls:
        raise SystemExit("tilerun setup.py: no manifest (*.yaml) in %s" % spec)
    files += [(os.path.join(spec, f), "share/tilerun/manifest/" + f) for f in yamls]
    return files, None


class BuildPy(build_py):
    """Copies the bundled files into the package, and says where an installed tilerun is."""

    def run(self):
        if getattr(self, "editable_mode", False):
            raise SystemExit("tilerun setup.py: editable installs (pip install -e) are not supported: the package "
                             "bundles the library, the manifest and the CPU backend as built files; use "
                             "pip install ./python (again after a change)")
        super().run()
        files, prefix = bundle()
        pkg = os.path.join(self.build_lib, "tilerun")
        for bundled in ("lib", "share"):  # what an earlier build bundled and this one may not
            shutil.rmtree(os.path.join(pkg, bundled), ignore_errors=True)
        for src, dst in files:
            out = os.path.join(pkg, dst)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copyfile(src, out)
            if dst.endswith(".so"):
                os.chmod(out, 0o755)
        with open(os.path.join(pkg, "_install.py"), "w") as f:
            f.write('"""Written by setup.py: where this package\'s tilerun is."""\n')
            f.write("PREFIX = %r  # None: the package's own (tilerun/lib, tilerun/share)\n" % prefix)


setup(
    name="tilerun",
    version=version(),
    description="Dispatches tensor ops declared in a YAML manifest to kernels",
    packages=["tilerun"],
    package_data={"tilerun": ["py.typed", "__init__.pyi", "_ext.pyi"]},
    python_requires=">=3.11",
    ext_modules=[Extension(
        "tilerun._ext", ["tilerun/_ext.c"], py_limited_api=True,
        define_macros=[("Py_LIMITED_API", "0x030B0000")],
        extra_compile_args=["-std=c11", "-fvisibility=hidden"])],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
    cmdclass={"build_py": BuildPy},
    zip_safe=False,
)
