"""tilerun.bzl: the macros every package uses for C libraries, binaries and Catch2 tests."""

# C11 for the library code; tests are C++ (Catch2) and compile the C headers as C++.
TR_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Werror=return-type",
]

def tr_c_library(name, srcs = [], hdrs = [], deps = [], copts = [], **kwargs):
    """A C11 library of tilerun's own code."""
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps,
        copts = TR_COPTS + copts,
        **kwargs
    )

def tr_c_binary(name, srcs = [], deps = [], copts = [], **kwargs):
    """A C11 program of tilerun's own."""
    native.cc_binary(
        name = name,
        srcs = srcs,
        deps = deps,
        copts = TR_COPTS + copts,
        **kwargs
    )

def tr_test(name, srcs, deps = [], copts = [], **kwargs):
    """A Catch2 test beside the code it tests; Catch2's main is compiled once, in
    //third_party/catch2:main."""
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + ["//third_party/catch2:main"],
        copts = TR_COPTS + copts,
        **kwargs
    )

def tr_valgrind_test(name, test, data = [], **kwargs):
    """Runs the test binary `test` again under valgrind's memcheck (tagged `valgrind`, so the
    test command leaves it out of the sanitizer step)."""
    native.sh_test(
        name = name,
        size = "medium",
        srcs = ["//tools:valgrind_test.sh"],
        args = ["$(rootpath %s)" % test],
        data = [test] + data,
        tags = ["valgrind"],
        **kwargs
    )
