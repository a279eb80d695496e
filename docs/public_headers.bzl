"""public_headers.bzl: the public headers of a cc_library as runfiles, for a test that compiles
against them at run time as a user would (cc -Iinclude ...)."""

def _public_headers_impl(ctx):
    headers = [
        f
        for f in ctx.attr.lib[CcInfo].compilation_context.headers.to_list()
        if f.is_source and f.short_path.startswith(ctx.attr.prefix)
    ]
    return [DefaultInfo(files = depset(headers), runfiles = ctx.runfiles(files = headers))]

public_headers = rule(
    implementation = _public_headers_impl,
    doc = "The source headers of `lib` (and its deps) whose path starts with `prefix`.",
    attrs = {
        "lib": attr.label(providers = [CcInfo]),
        "prefix": attr.string(default = "include/tilerun/"),
    },
)
