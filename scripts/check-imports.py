#!/usr/bin/env python3
"""The module layout's rules (docs/architecture.md), checked over src/:

- no module imports one that imports it back, directly or through others
  (an edge is any `crate::a::b` or `super::x` path in a file, `use` or not);
- the pure core imports no pgrx and nothing of the crate outside itself;
- only the worker loop knows both modes' jobs.

Prints each violation and exits 1; prints a one-line summary and exits 0 when
the graph is clean. Usage: scripts/check-imports.py [SRC_DIR]
"""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")

# The pure core: plain Rust, unit-tested with `cargo test`.
PURE = {
    "segment::buffer", "segment::step", "segment::range_plan", "segment::reserve", "segment::opaque", "segment::opaque_runs",
    "snowflake::layout", "snowflake::generator", "snowflake::claim_plan", "snowflake::quorum",
    "runtime::standby_rule", "runtime::catalog",
}
# The one module that may use the jobs of both modes.
WORKER_LOOP = "runtime::worker_loop"


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3]  # strip .rs
    parts = rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts == ["lib"]:
        return ""
    return "::".join(parts)


def main():
    files = {}
    for root, _, names in os.walk(SRC):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                files[module_of(p)] = p
    modules = set(files)

    def resolve(path):
        """The longest prefix of `a::b::c` that is a module file."""
        parts = path.split("::")
        for k in range(len(parts), 0, -1):
            cand = "::".join(parts[:k])
            if cand in modules:
                return cand
        return None

    edges = {m: set() for m in modules}
    problems = []
    for m, p in files.items():
        text = open(p, encoding="utf-8").read()
        # comments may name modules freely
        code = re.sub(r"//[^\n]*", "", text)
        if "crate::{" in code:
            problems.append(f"{p}: `use crate::{{...}}` groups hide edges from this check; write one path per item")
        for path in re.findall(r"\bcrate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", code):
            target = resolve(path)
            if target and target != m and not m.startswith(target + "::"):
                edges[m].add(target)
        parent = m.rsplit("::", 1)[0] if "::" in m else ""
        for path in re.findall(r"\bsuper::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", code):
            if path.startswith("tests") or not parent:
                continue
            target = resolve(parent + "::" + path)
            if target and target != m:
                edges[m].add(target)
        if m in PURE:
            if re.search(r"\bpgrx\b", code):
                problems.append(f"{p}: a pure module names pgrx")
            for t in edges[m]:
                if t not in PURE:
                    problems.append(f"{p}: a pure module imports {t}")

    # mod.rs files only declare their children: no edges through them
    for m in modules:
        edges[m] = {t for t in edges[m] if not any(o.startswith(t + "::") for o in modules)}

    jobs_of_both = [m for m in modules if any(t.startswith("segment::") and t not in PURE for t in edges[m])
                    and any(t.startswith("snowflake::") and t not in PURE for t in edges[m])
                    and not m.startswith(("segment::", "snowflake::"))]
    for m in jobs_of_both:
        if m not in (WORKER_LOOP, ""):
            problems.append(f"{files[m]}: uses both modes (only {WORKER_LOOP} may)")

    # cycles (Tarjan's strongly connected components)
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            strong(v)
    for comp in sccs:
        inner = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp]
        problems.append("import circle: " + ", ".join(comp) + " (" + "; ".join(inner) + ")")

    if problems:
        print("check-imports: the module layout's rules are broken:", file=sys.stderr)
        for pr in problems:
            print("  " + pr, file=sys.stderr)
        return 1
    n_edges = sum(len(e) for e in edges.values())
    print(f"check-imports: {len(modules)} modules, {n_edges} imports, no circle; the pure core imports no pgrx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
