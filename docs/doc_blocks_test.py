"""doc_blocks_test.py: runs the code blocks of README.md and docs/*.md that are marked runnable.

A block is marked by an HTML comment on the line just before its opening fence:

    <!-- test: sh -->          run with bash (-e, -o pipefail)
    <!-- test: python -->      run with this python3
    <!-- test: c NAME.c -->    written to NAME.c (NAME optional), compiled against the public
                               headers and libtilerun.so, and run
    <!-- test: file NAME -->   written to NAME only, for a later block of the same page to use

The blocks of one page run in order, in one directory laid out as the repository is after
`bazel build //tools:tilerun //python:libtilerun.so //backends/cpu:installed`: include/,
manifest/spec, pipelines/, python/ (the binding) and bazel-bin/ (tools/tilerun,
python/libtilerun.so, backends/cpu). Every block sees the environment the docs tell a reader to
set up: TILERUN_BACKEND_PATH=$PWD/bazel-bin/backends/cpu and PYTHONPATH=$PWD/python.

Fails when a marked block fails (or runs past 120 s), when a marker is malformed or not followed
by a fence, when no block at all is marked, and when README.md lacks a marked C or Python block.

Under Bazel (`bazel test //docs:doc_blocks_test`) it reads the runfiles; by hand, from the
repository root after that build and `bazel build //python:tilerun` (the extension, which the
layout does not hold): `TILERUN_EXTENSION=$PWD/bazel-bin/python/tilerun/_ext.so python3
docs/doc_blocks_test.py [PAGE.md ...]` (docs/building.md).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARKER = re.compile(r"^<!-- test: (?P<kind>\S+)(?: (?P<name>[A-Za-z0-9_.-]+))? -->\s*$")
ANY_MARKER = re.compile(r"^<!-- test:")
FENCE = re.compile(r"^(?P<fence>```+)\s*(?P<lang>\S*)\s*$")
KINDS = ("sh", "python", "c", "file")
TIMEOUT_S = 120
C_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]


class Block:
    def __init__(self, page, line, kind, name, text):
        self.page, self.line, self.kind, self.name, self.text = page, line, kind, name, text

    def where(self):
        return "%s:%d (%s)" % (self.page, self.line, self.kind)


def parse(page, text):
    """The marked blocks of one page, and the problems with its markers."""
    blocks, problems = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not ANY_MARKER.match(line):
            i += 1
            continue
        m = MARKER.match(line)
        if not m or m.group("kind") not in KINDS:
            problems.append("%s:%d: malformed marker %r (kinds: %s)"
                            % (page, i + 1, line, ", ".join(KINDS)))
            i += 1
            continue
        if m.group("kind") == "file" and not m.group("name"):
            problems.append("%s:%d: a file block needs a name" % (page, i + 1))
        f = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not f or not f.group("lang"):
            problems.append("%s:%d: the marker is not followed by an opening fence" % (page, i + 1))
            i += 1
            continue
        end = i + 2
        while end < len(lines) and lines[end].strip() != f.group("fence"):
            end += 1
        if end == len(lines):
            problems.append("%s:%d: the block is never closed" % (page, i + 2))
            break
        blocks.append(Block(page, i + 2, m.group("kind"), m.group("name"),
                            "\n".join(lines[i + 2:end]) + "\n"))
        i = end + 1
    return blocks, problems


def layout(root, work):
    """Makes `work` look like the repository root after the build, from `root` (the runfiles,
    or the repository itself when run by hand)."""
    if os.path.isdir(os.path.join(root, "bazel-bin")):  # by hand: the repository
        bin_dir = os.path.join(root, "bazel-bin")
    else:  # under Bazel: built files sit beside the sources
        bin_dir = root
    links = {
        "include": os.path.join(root, "include"),
        "manifest": os.path.join(root, "manifest"),
        "pipelines": os.path.join(root, "pipelines"),
        "python": os.path.join(root, "python"),
        "bazel-bin/tools/tilerun": os.path.join(bin_dir, "tools", "tilerun"),
        "bazel-bin/python/libtilerun.so": os.path.join(bin_dir, "python", "libtilerun.so"),
        "bazel-bin/python/libtilerun.so.0": os.path.join(bin_dir, "python", "libtilerun.so.0"),
        "bazel-bin/backends/cpu": os.path.join(bin_dir, "backends", "cpu"),
    }
    for rel, target in links.items():
        if not os.path.exists(target):
            raise SystemExit("doc_blocks_test: %s is missing (%s)" % (rel, target))
        path = os.path.join(work, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(os.path.abspath(target), path)


def environment(work):
    env = dict(os.environ)
    for name in ("TILERUN_MANIFEST_DIR", "TILERUN_PIPELINE", "TILERUN_LIBRARY"):
        env.pop(name, None)
    env["TILERUN_BACKEND_PATH"] = os.path.join(work, "bazel-bin", "backends", "cpu")
    env["PYTHONPATH"] = os.path.join(work, "python")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(block, work, env, index):
    """Runs one block in `work`; returns (ok, output)."""
    name = block.name or "block%d.%s" % (index, {"c": "c", "python": "py"}.get(block.kind, "sh"))
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(block.text)
    if block.kind == "file":
        return True, ""
    if block.kind == "sh":
        steps = [["bash", "-e", "-o", "pipefail", name]]
    elif block.kind == "python":
        steps = [[sys.executable, name]]
    else:
        exe = os.path.splitext(name)[0]
        lib_dir = os.path.join(work, "bazel-bin", "python")
        # The compiler runs without the sanitizer runtime the wrapper preloads (for the program).
        cc_env = dict(env)
        cc_env.pop("LD_PRELOAD", None)
        steps = [(["cc"] + C_FLAGS + ["-Iinclude", name, "-L" + lib_dir, "-ltilerun",
                                     "-Wl,-rpath," + lib_dir, "-o", exe], cc_env),
                 ["./" + exe]]
    output = ""
    for step in steps:
        argv, step_env = step if isinstance(step, tuple) else (step, env)
        try:
            p = subprocess.run(argv, cwd=work, env=step_env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            return False, output + (e.output or b"").decode(errors="replace") + \
                "\n(stopped after %d s)" % TIMEOUT_S
        output += "$ %s\n%s" % (" ".join(argv), p.stdout.decode(errors="replace"))
        if p.returncode != 0:
            return False, output + "(exit status %d)" % p.returncode
    return True, output


def main(argv):
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    if srcdir and workspace:
        root = os.path.join(srcdir, workspace)
    else:
        root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             os.pardir))
    pages = argv or ["README.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    tmp = tempfile.mkdtemp(prefix="doc_blocks.", dir=os.environ.get("TEST_TMPDIR"))
    failures, problems, total, readme_kinds = [], [], 0, set()
    try:
        for page in pages:
            with open(os.path.join(root, page)) as f:
                blocks, page_problems = parse(page, f.read())
            problems += page_problems
            if not blocks:
                continue
            work = os.path.join(tmp, page.replace("/", "_"))
            os.makedirs(work)
            layout(root, work)
            env = environment(work)
            for i, block in enumerate(blocks):
                total += 1
                if page == "README.md":
                    readme_kinds.add(block.kind)
                ok, output = run(block, work, env, i)
                print("%s %s" % ("ok    " if ok else "FAILED", block.where()), flush=True)
                if not ok:
                    failures.append((block, output))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for block, output in failures:
        print("\n==== %s failed; the block:\n%s---- its output:\n%s" % (block.where(), block.text,
                                                                        output))
    if not argv or "README.md" in argv:
        for kind in ("c", "python"):
            if kind not in readme_kinds:
                problems.append("README.md has no marked %s block (its example must be tested)"
                                % kind)
    if total == 0:
        problems.append("no marked block in %s: nothing was tested" % ", ".join(pages))
    for p in problems:
        print("PROBLEM " + p)
    print("\n%d marked blocks, %d failed, %d marker problems" % (total, len(failures),
                                                               len(problems)))
    return 1 if failures or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
