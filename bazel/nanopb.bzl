"""nanopb.bzl: a .proto plus its .options into a C library, through Debian's nanopb generator."""

def tr_nanopb_library(name, proto, options = None, deps = [], imports = [], **kwargs):
    """Generates <base>.pb.h and <base>.pb.c beside the .proto (in the output tree) and compiles
    them. Include the header as "<package>/<base>.pb.h". `imports`: the .proto files it imports
    (from the same package; their libraries go in deps)."""
    base = proto.rsplit(".", 1)[0]
    srcs = [proto] + ([options] if options else []) + imports
    opt = "-f $(location %s)" % options if options else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = [base + ".pb.h", base + ".pb.c"],
        # nanopb_generator.py runs under Debian's python3 (it needs python3-protobuf and protoc).
        cmd = ("/usr/bin/python3 /usr/bin/nanopb_generator.py -q --error-on-unmatched " +
               "-I $$(dirname $(location %s)) -D $(RULEDIR) %s $(location %s)") % (proto, opt, proto),
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.c"],
        hdrs = [base + ".pb.h"],
        deps = deps + ["//third_party:nanopb"],
        **kwargs
    )
