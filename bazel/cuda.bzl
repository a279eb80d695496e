"""cuda.bzl: CUDA sources through nvcc (a genrule), and NVRTC / driver-API linkage.

Every target made here carries `target_compatible_with = CUDA_COMPATIBLE`: where no CUDA Toolkit
was found (see //third_party/cuda:cuda_configure.bzl) they are left out of `bazel build //...`,
and tests depending on them are reported as SKIPPED, never as passed.
"""

load("@local_cuda//:defs.bzl", "CUDA_COMPATIBLE", "NVCC")
load("//bazel:tilerun.bzl", "tr_c_library", "tr_test")

# The architectures CI compiles for: Hopper (the development target) and Ampere.
TR_CUDA_ARCHS = ["sm_90a", "sm_80"]

def _gencode(arch):
    return "-gencode=arch=compute_%s,code=%s" % (arch[3:], arch)

def tr_cuda_library(name, srcs, hdrs = [], deps = [], archs = TR_CUDA_ARCHS, nvcc_opts = [], **kwargs):
    """Compiles .cu sources with nvcc into objects (one genrule per source) and wraps them,
    with the CUDA runtime, as a cc_library."""
    objs = []
    for src in srcs:
        obj = "_%s_objs/%s.o" % (name, src.rsplit(".", 1)[0])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC or "nvcc",
                "-O3 -std=c++17 -Xcompiler -fPIC",
                " ".join([_gencode(a) for a in archs]),
                "-I. -I$(GENDIR)",
                " ".join(nvcc_opts),
                "-c $(location %s) -o $@" % src,
            ]),
            target_compatible_with = CUDA_COMPATIBLE,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = [h for h in hdrs if not h.endswith(".cuh")],
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )

def tr_cuda_c_library(name, deps = [], **kwargs):
    """A C library that calls NVRTC or the CUDA driver API (no nvcc needed)."""
    tr_c_library(
        name = name,
        deps = deps + ["@local_cuda//:cuda_headers"],
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )

def tr_cuda_test(name, deps = [], tags = [], **kwargs):
    """A Catch2 test of CUDA code. Mark it `gpu` in tags when it needs a GPU to run: the test
    command leaves those out on a machine without one and lists them as not run."""
    tr_test(
        name = name,
        deps = deps,
        tags = tags,
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )
