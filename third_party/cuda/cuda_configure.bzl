"""cuda_configure.bzl: a repository rule that finds the CUDA Toolkit and wraps it as @local_cuda.

Where the toolkit is found:
  1. TILERUN_CUDA_PATH, when set (`none` or an empty value turns CUDA off: the build then runs as
     on a machine without CUDA);
  2. /usr/local/cuda;
  3. the directory above the `nvcc` found on PATH.
A toolkit counts as present when bin/nvcc, include/cuda.h and include/nvrtc.h exist.

@local_cuda//:defs.bzl then says CUDA_AVAILABLE, NVCC and CUDA_COMPATIBLE (the value for a
target's `target_compatible_with`: empty with CUDA, a never-satisfied constraint without it, so
that CUDA targets are left out of `bazel build //...` and their tests reported as SKIPPED, not
passed). @local_cuda//:cuda_headers, :cudart, :nvrtc and :cuda_driver wrap the libraries.
"""

_NO_CUDA_BUILD = """
# @local_cuda: no CUDA Toolkit was found ({reason}); CUDA targets are incompatible.
package(default_visibility = ["//visibility:public"])

constraint_setting(name = "cuda")

constraint_value(name = "cuda_missing", constraint_setting = ":cuda")

[cc_library(name = n, target_compatible_with = [":cuda_missing"]) for n in
 ["cuda_headers", "cudart", "nvrtc", "cuda_driver"]]

filegroup(name = "nvcc", srcs = [])
"""

_CUDA_BUILD = """
# @local_cuda: the CUDA Toolkit at {path}.
package(default_visibility = ["//visibility:public"])

constraint_setting(name = "cuda")

constraint_value(name = "cuda_missing", constraint_setting = ":cuda")

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    linkopts = ["-L{path}/lib64", "-Wl,-rpath,{path}/lib64", "-lcudart"],
    deps = [":cuda_headers"],
)

cc_library(
    name = "nvrtc",
    linkopts = ["-L{path}/lib64", "-Wl,-rpath,{path}/lib64", "-lnvrtc"],
    deps = [":cuda_headers"],
)

# The driver API links against the toolkit's stub; the real libcuda.so.1 comes with the driver
# on a machine that has a GPU.
cc_library(
    name = "cuda_driver",
    linkopts = ["-L{path}/lib64/stubs", "-lcuda"],
    deps = [":cuda_headers"],
)

filegroup(name = "nvcc", srcs = ["bin/nvcc"])
"""

def _find_cuda(ctx):
    env = ctx.os.environ.get("TILERUN_CUDA_PATH")
    if env != None:
        if env in ("", "none", "off", "0"):
            return None, "TILERUN_CUDA_PATH=%s turns CUDA off" % env
        return env, None
    if ctx.path("/usr/local/cuda").exists:
        return "/usr/local/cuda", None
    nvcc = ctx.which("nvcc")
    if nvcc != None:
        return str(nvcc.dirname.dirname), None
    return None, "no /usr/local/cuda and no nvcc on PATH"

def _cuda_configure_impl(ctx):
    path, reason = _find_cuda(ctx)
    if path != None:
        for needed in ["bin/nvcc", "include/cuda.h", "include/nvrtc.h"]:
            if not ctx.path(path + "/" + needed).exists:
                reason = "%s/%s is missing" % (path, needed)
                path = None
                break
    if path == None:
        ctx.file("BUILD", _NO_CUDA_BUILD.format(reason = reason))
        ctx.file("defs.bzl", "\n".join([
            '"""@local_cuda: no CUDA Toolkit (%s)."""' % reason,
            "CUDA_AVAILABLE = False",
            'CUDA_PATH = ""',
            'NVCC = ""',
            'CUDA_COMPATIBLE = ["@local_cuda//:cuda_missing"]',
            "",
        ]))
        return
    ctx.symlink(path + "/include", "include")
    ctx.symlink(path + "/bin", "bin")
    ctx.file("BUILD", _CUDA_BUILD.format(path = path))
    ctx.file("defs.bzl", "\n".join([
        '"""@local_cuda: the CUDA Toolkit at %s."""' % path,
        "CUDA_AVAILABLE = True",
        'CUDA_PATH = "%s"' % path,
        'NVCC = "%s/bin/nvcc"' % path,
        "CUDA_COMPATIBLE = []",
        "",
    ]))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["TILERUN_CUDA_PATH", "PATH"],
    local = True,
)
