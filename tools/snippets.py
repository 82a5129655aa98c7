#!/usr/bin/env python3
"""Extracts the C++ snippets of the README and of the public headers into translation
units that the build compiles (target readme_snippets; ctest snippets_test builds it).

README: every ```cpp block. An HTML comment on the line before it names the context it
runs in: <!-- snippet: cluster -->; without one it is "none". Lines of a block that
begin with #include or `namespace X = ...;` go to file scope; the rest becomes the body
of a function of its own.

Headers (*/include/actortrain/**/*.hpp): a comment block of lines "//   code" right after
a line "// example[CONTEXT]:". A block that looks like code (two or more lines ending in
';', not a "- " list) without that marker is an error: every snippet is compiled.

Contexts (the names a snippet may use without declaring them) are the functions'
preludes in tests/tools/snippet_contexts.hpp: none, app (datasets train, test, data, a
model mlp/net, metrics, fit options opts, a dataset_fn), trainer (app + a trainer t),
in_model and in_dataset (inside `using namespace actortrain::model` or `::dataset`,
the latter with images, labels and epoch), system (app, with CAF), with_sys (app + an
actor_system sys and a cluster_spec spec), cluster (with_sys + a cluster c), main (app + argc, argv; the
body returns int), filescope (at namespace scope, with CAF: whole functions), sim
(my_job(); Boost.Test's macros). Every context but none, in_model and in_dataset is
inside `using namespace actortrain`.

The README's ```cmake block marked <!-- snippet: install_app --> must be the project
file the install test builds (tests/tools/install_app/CMakeLists.txt, comments aside).

usage: snippets.py ROOT OUT_DIR   writes OUT_DIR/{model,actors}_snippets.cpp
"""
import glob
import os
import re
import sys

CONTEXTS = {"none", "app", "trainer", "in_model", "in_dataset", "system", "with_sys", "cluster", "main", "filescope",
            "sim"}
# Contexts whose snippets need CAF (the actors translation unit).
CAF = {"system", "with_sys", "cluster", "main", "filescope", "sim"}


def fail(msg):
    print(f"snippets: {msg}", file=sys.stderr)
    sys.exit(1)


def readme_snippets(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            ctx = "none"
            m = re.match(r"<!--\s*snippet:\s*(\w+)\s*-->", lines[i - 1].strip()) if i > 0 else None
            if m:
                ctx = m.group(1)
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                fail(f"{path}:{i + 1}: a ```cpp block that never ends")
            out.append((f"{os.path.basename(path)}:{i + 2}", ctx, lines[i + 1:j]))
            i = j + 1
        else:
            i += 1
    return out


def check_install_app(root):
    """The README's ```cmake block marked install_app is what the install test builds."""
    lines = open(os.path.join(root, "README.md"), encoding="utf-8").read().split("\n")
    want = [l for l in open(os.path.join(root, "tests/tools/install_app/CMakeLists.txt")).read().split("\n")
            if l.strip() and not l.startswith("#")]
    for i, l in enumerate(lines):
        if re.match(r"<!--\s*snippet:\s*install_app\s*-->", l.strip()):
            if i + 1 >= len(lines) or lines[i + 1].strip() != "```cmake":
                fail(f"README.md:{i + 1}: install_app must mark a ```cmake block")
            j = i + 2
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            got = [l for l in lines[i + 2:j] if l.strip()]
            if got != want:
                fail(f"README.md:{i + 3}: the CMake snippet differs from tests/tools/install_app/CMakeLists.txt "
                     f"(which the install test builds): {got} != {want}")
            return
    fail("README.md: no ```cmake block marked <!-- snippet: install_app -->")


def looks_like_code(block):
    if any(l[5:].lstrip().startswith("- ") for l in block):
        return False
    return sum(1 for l in block if re.search(r";\s*(//.*)?$", l[5:])) >= 2


def header_snippets(root, path):
    rel = os.path.relpath(path, root)
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("//   "):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("//   "):
            j += 1
        block = lines[i:j]
        m = re.match(r"//\s*example\[(\w+)\]:\s*$", lines[i - 1]) if i > 0 else None
        if m:
            out.append((f"{rel}:{i + 1}", m.group(1), [l[5:] for l in block]))
        elif looks_like_code(block):
            fail(f"{rel}:{i + 1}: a code example without '// example[CONTEXT]:' on the line before it "
                 f"(every snippet is compiled; contexts: {', '.join(sorted(CONTEXTS))})")
        i = j
    return out


def unit(snippets, caf):
    heads, bodies = [], []
    for n, (where, ctx, code) in enumerate(snippets):
        if ctx not in CONTEXTS:
            fail(f"{where}: unknown context '{ctx}' ({', '.join(sorted(CONTEXTS))})")
        body = []
        for l in code:
            if l.startswith("#include") or re.match(r"\s*namespace \w+ = [\w:]+;", l):
                heads.append(l)
            else:
                body.append(l)
        if ctx == "filescope":
            bodies.append(f"// {where}\nnamespace filescope_{n} {{\nusing namespace actortrain;\n"
                          f"#line {where.rsplit(':', 1)[1]} \"{where.rsplit(':', 1)[0]}\"\n" + "\n".join(body) + "\n}\n")
            continue
        ret = "int" if ctx == "main" else "void"
        bodies.append(f"// {where}\n[[maybe_unused]] {ret} snippet_{n}(SNIPPET_{ctx.upper()}_ARGS) {{\n"
                      f"  SNIPPET_{ctx.upper()}_PRELUDE\n#line {where.rsplit(':', 1)[1]} \"{where.rsplit(':', 1)[0]}\"\n"
                      + "\n".join(body) + ("\n  return 0;" if ctx == "main" else "")
                      + "\n}\n")
    text = "// Generated by tools/snippets.py: the C++ snippets of the README and the public headers.\n"
    if caf:
        text += "#define SNIPPETS_WITH_CAF 1\n"
    text += '#include "snippet_contexts.hpp"\n'
    for h in dict.fromkeys(heads):
        text += h + "\n"
    text += "namespace snippets {\nusing namespace snippet_context;\n"
    text += "\n".join(bodies)
    text += "}  // namespace snippets\n"
    return text


def main():
    if len(sys.argv) != 3:
        fail(__doc__.strip().split("\n")[-1])
    root, out_dir = sys.argv[1], sys.argv[2]
    check_install_app(root)
    found = readme_snippets(os.path.join(root, "README.md"))
    for h in sorted(glob.glob(os.path.join(root, "*/include/actortrain/**/*.hpp"), recursive=True)):
        found += header_snippets(root, h)
    if len(found) < 5:
        fail(f"only {len(found)} snippets found: the extraction is broken")
    os.makedirs(out_dir, exist_ok=True)
    plain = [s for s in found if s[1] not in CAF]
    with_caf = [s for s in found if s[1] in CAF]
    for name, group, caf in (("model_snippets.cpp", plain, False), ("actors_snippets.cpp", with_caf, True)):
        text = unit(group, caf)
        path = os.path.join(out_dir, name)
        if not os.path.exists(path) or open(path).read() != text:
            open(path, "w").write(text)
    print(f"snippets: {len(plain)} without CAF, {len(with_caf)} with CAF")


if __name__ == "__main__":
    main()
