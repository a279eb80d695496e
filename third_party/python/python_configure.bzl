"""python_configure.bzl: a repository rule that wraps CPython's headers as @local_python.

The interpreter asked is $TILERUN_PYTHON, else /usr/bin/python3 (Debian's, with python3-dev:
tools/ensure-deps.sh installs it), else the first python3 on PATH; its sysconfig names the
include folder. @local_python//:headers is then a cc_library of those headers, and
@local_python//:defs.bzl says PYTHON_AVAILABLE. With no interpreter or no Python.h the library
is incompatible (its targets are SKIPPED, never passed), and defs.bzl says why.
"""

_MISSING = """
# @local_python: no CPython headers ({reason}).
package(default_visibility = ["//visibility:public"])

constraint_setting(name = "python")

constraint_value(name = "python_missing", constraint_setting = ":python")

cc_library(name = "headers", target_compatible_with = [":python_missing"])
"""

_PRESENT = """
# @local_python: CPython's headers from {path}.
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
"""

def _interpreter(ctx):
    env = ctx.os.environ.get("TILERUN_PYTHON")
    if env:
        return ctx.path(env)
    if ctx.path("/usr/bin/python3").exists:
        return ctx.path("/usr/bin/python3")
    return ctx.which("python3")

def _python_configure_impl(ctx):
    python = _interpreter(ctx)
    reason = None
    include = None
    if python == None or not python.exists:
        reason = "no python3 interpreter"
    else:
        r = ctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
        include = r.stdout.strip()
        if r.return_code != 0 or not include:
            reason = "%s cannot say its include folder: %s" % (python, r.stderr.strip())
        elif not ctx.path(include + "/Python.h").exists:
            reason = "%s/Python.h is missing (install python3-dev)" % include
    if reason != None:
        ctx.file("BUILD", _MISSING.format(reason = reason))
        ctx.file("defs.bzl", "PYTHON_AVAILABLE = False\nPYTHON_REASON = %r\n" % reason)
        return
    ctx.symlink(include, "include")
    ctx.file("BUILD", _PRESENT.format(path = include))
    ctx.file("defs.bzl", "PYTHON_AVAILABLE = True\nPYTHON_REASON = ''\n")

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["TILERUN_PYTHON"],
    local = True,
)
