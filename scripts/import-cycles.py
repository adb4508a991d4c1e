#!/usr/bin/env python3
"""Find import circles between the modules (files) of each crate.

    scripts/import-cycles.py                 # domain, app and server: file level
    scripts/import-cycles.py --folders       # one node per top-level folder ("rooms")
    scripts/import-cycles.py server/src --with-tests
    scripts/import-cycles.py --strict        # a folder and its own files count too

Arguments are crate directories (default: domain app server; `x/src` is
taken as `x`). Exit status 1 when any circle is found, 0 when none, so it
can run as a check. Standard library only; nothing is compiled.

Method. Every .rs file under src/ is a node named by its module path
(lib.rs is `crate`, foo/mod.rs is `foo`, foo/bar.rs is `foo::bar`; a main.rs
beside a lib.rs is its own node, `main.rs`, whose `<lib name>::` paths lead
into the library). Comments and string/char literals, raw strings included,
are blanked first, keeping line numbers. File A depends on module B when A
names a path into B: in a `use` (grouped trees expanded, `pub use`
re-exports included) or in code, starting with `crate::`, `$crate::`,
`super::`, `self::`, the name of a child module, or a name a `use` bound to
a module (`use crate::store;` then `store::engine::f`). A path counts for
its longest prefix that is a module file (`crate::store::engine::reads::f`
-> `store::engine::reads`, `crate::store::Ts` -> `store`); edges to
ancestors are kept, `mod x;` declarations are not edges. Unless
--with-tests, items under `#[cfg(test)]`, the files such a `mod x;`
declares, `*_tests.rs` files and tests/ folders are left out: test code may
import anything. Circles are the strongly connected components (Tarjan,
iterative) of more than one node, printed largest first with one shortest
circle through each, and per member the members it imports and one line
that does. --folders merges every module into its first segment
(`store::engine::reads` -> `store`, lib.rs stays `crate`).

A folder's mod.rs is its front door: it declares its files, re-exports
what the folder offers, and its files use what it declares. Edges between
a module and its own ancestors are therefore left out unless --strict
(with them, nearly every folder is a circle of its own); what counts is
files importing their siblings, cousins or other folders in a circle.

Known limits: a macro's body counts for the file defining the macro, not
where it expands; paths inside strings (serde `with = "..."`) are not read;
`use` bindings count for the whole file, whatever block they sit in; a glob
import binds only the child modules of a module (not of an enum or type);
`#[path]` attributes and src/bin/ are not followed.
"""
import argparse
import bisect
import os
import re
import sys
from collections import deque
from pathlib import Path

# Where a comment or literal starts; raw strings and nested comments are
# finished by hand below since a regular expression cannot count them.
LITERAL = re.compile(r"""/[/*]|(?<!\w)[bc]?r(#*)"|(?<!\w)[bc]?"(?:\\.|[^"\\])*"|'(?:\\(?:u\{\w+\}|x\w\w|.)|[^\\'])'""", re.S)
CFG_TEST = re.compile(r"#\[\s*cfg\s*\(\s*(?:test|all\s*\([^\]]*\btest\b[^\]]*\))\s*\)\s*\]")
PATH = re.compile(r"(?<![\w:$])(\$?[A-Za-z_]\w*)((?:\s*::\s*[A-Za-z_]\w*)+)")
MAIN = ("[main.rs]",)  # not a Rust identifier, so no module can be called this


def blank(text):
    """Only the newlines of `text`, so line numbers stay right."""
    return "\n" * text.count("\n")


def strip_code(src):
    """Blank comments and string/char literals; lifetimes ('a) are left alone."""
    out, pos = [], 0
    while m := LITERAL.search(src, pos):
        start, tok, end = m.start(), m.group(), m.end()
        if tok == "//":
            end = src.find("\n", start) % (len(src) + 1)  # -1 (last line) -> end of text
        elif tok == "/*":
            depth = 1
            while depth and end < len(src):
                step = src[end:end + 2]
                depth += {"/*": 1, "*/": -1}.get(step, 0)
                end += 2 if step in ("/*", "*/") else 1
        elif m.group(1) is not None:  # r#"..."#: ends at a quote and as many #s
            close = src.find('"' + m.group(1), end)
            end = len(src) if close < 0 else close + 1 + len(m.group(1))
        filler = " " if tok[0] == "/" else tok[-1] * 2  # a comment is a space, a literal "" or ''
        out += [src[pos:start], filler, blank(src[start:end])]
        pos = end
    return "".join(out + [src[pos:]])


def item_end(code, i):
    """End of the item starting at i: after its first `;` or its `{ }` block."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] in "([":
            depth += 1
        elif code[j] in ")]":
            depth -= 1
        elif depth == 0 and code[j] == ";":
            return j + 1
        elif depth == 0 and code[j] == "{":
            return block_end(code, j)
    return len(code)


def block_end(code, i):
    """Index after the `}` that closes the `{` at i."""
    depth = 0
    for j in range(i, len(code)):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return j + 1
    return len(code)


def use_paths(text, offset):
    """Expand a use tree: [(segments, name it binds or '*', offset of its last word)]."""
    toks = [(t.group(), offset + t.start()) for t in re.finditer(r"\$?\w+|::|[{},*]", text)]
    out, pos = [], 0

    def tree(segs):
        nonlocal pos
        at = offset
        while pos < len(toks) and toks[pos][0] not in (",", "}"):
            tok, at = toks[pos]
            pos += 1
            if tok == "{":  # a group: each branch continues the same prefix
                while pos < len(toks) and toks[pos][0] != "}":
                    if toks[pos][0] == ",":  # also a trailing one, as rustfmt leaves
                        pos += 1
                    else:
                        tree(list(segs))
                pos += 1
                return
            if tok == "*" or tok == "as":
                out.append((segs, "*" if tok == "*" else toks[pos][0], at))
                pos += tok == "as"
                return
            # `a::{self, b}`: a bare `self` in a group names the prefix itself
            if tok != "::" and not (tok == "self" and segs and (pos == len(toks) or toks[pos][0] != "::")):
                segs.append(tok)
        if segs:
            out.append((segs, segs[-1], at))

    tree([])
    return out


class Crate:
    def __init__(self, crate_dir):
        self.dir = Path(crate_dir)
        self.src = self.dir / "src"
        toml = self.dir / "Cargo.toml"
        text = toml.read_text() if toml.exists() else ""
        # How main.rs names the library: [lib] name, else the package's.
        names = [re.search(r"^\[%s\][^\[]*?^name\s*=\s*\"([^\"]+)\"" % s, text, re.M | re.S) for s in ("lib", "package")]
        self.lib = next((m.group(1).replace("-", "_") for m in names if m), self.dir.name)
        self.files = {}  # module path (tuple; () is the crate root) -> file
        for f in sorted(self.src.rglob("*.rs")):
            parts = f.relative_to(self.src).with_suffix("").parts
            if parts in (("lib",), ("main",)):
                mod = MAIN if parts == ("main",) and (self.src / "lib.rs").exists() else ()
            else:
                mod = parts[:-1] if parts[-1] == "mod" else parts
            self.files[mod] = f

    def absolute(self, segs, cur, aliases):
        """The full module path `segs` names from module `cur`; None if outside the crate."""
        first, rest = segs[0], list(segs[1:])
        if first in ("crate", "$crate"):
            base = MAIN if cur[:1] == MAIN else ()
        elif first in ("super", "self"):
            base, rest = cur, list(segs)
        elif cur[:1] == MAIN and first == self.lib:
            base = ()
        elif first in aliases:  # a `use` binding (None: outside) shadows a child's name
            if aliases[first] is None:
                return None
            base = aliases[first]
        elif cur + (first,) in self.files:  # 2018 paths: a child module is in scope
            base, rest = cur, list(segs)
        else:
            return None
        while rest and rest[0] in ("super", "self"):
            base = base[:-1] if rest.pop(0) == "super" else base
        return base + tuple(rest)

    def resolve(self, segs, cur, aliases):
        """The module file a path lands in: its longest prefix that is one."""
        path = self.absolute(segs, cur, aliases)
        while path is not None and path not in self.files:
            path = path[:-1] if path else None
        return path

    def edges(self, with_tests):
        """The modules read, and {(from, to): first line} between them."""
        found, hidden, read = {}, set(), []
        for mod, f in sorted(self.files.items()):  # a parent sorts before its children
            rel = f.relative_to(self.src)
            code = strip_code(f.read_text())
            if not with_tests:
                if ("tests" in rel.parts[:-1] or f.stem == "tests" or f.stem.endswith("_tests")
                        or any(mod[:k] in hidden for k in range(len(mod) + 1))
                        or re.search(r"#!\[\s*cfg\s*\(\s*test\s*\)\s*\]", code)):
                    continue
                for m in reversed(list(CFG_TEST.finditer(code))):  # from the end: offsets hold
                    end = item_end(code, m.end())
                    hidden.update(mod + (d,) for d in re.findall(r"\bmod\s+(\w+)\s*;", code[m.end():end]))
                    code = code[:m.start()] + blank(code[m.start():end]) + code[end:]
            read.append(mod)
            # `pub(in crate::x)` is a visibility, not a dependency
            code = re.sub(r"\bpub\s*\(\s*in\s+[^)]*\)", lambda m: blank(m.group()), code)
            lines = [i for i, c in enumerate(code) if c == "\n"]
            inline = [(m.start(), block_end(code, m.end() - 1), m.group(1))
                      for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code)]

            def scope(at):  # the module at an offset: the file's plus enclosing `mod x { }`
                return mod + tuple(name for s, e, name in inline if s <= at < e)

            refs, aliases, spans = [], {}, []
            for m in re.finditer(r"\buse\s+", code):
                end = item_end(code, m.end())
                spans.append((m.start(), end))
                for segs, name, at in use_paths(code[m.end():end], m.end()):
                    full = self.absolute(segs, scope(at), {})
                    refs.append((self.resolve(segs, scope(at), {}), at))
                    if name != "*":  # `use crate::store;` lets `store::x` name a module later
                        aliases[name] = full if full in self.files else None
                    elif full in self.files:  # `use super::*;` brings the children in too
                        for child in self.files:
                            if child[:-1] == full and child:
                                aliases.setdefault(child[-1], child)
            for s, e in spans:  # blanked (same length) so the path scan skips them
                code = code[:s] + " " * (e - s) + code[e:]
            for m in PATH.finditer(code):
                segs = [m.group(1)] + re.findall(r"\w+", m.group(2))
                refs.append((self.resolve(segs, scope(m.start()), aliases), m.start()))
            for target, at in refs:
                if target is not None and target != mod:
                    line = bisect.bisect_left(lines, at) + 1
                    found[(mod, target)] = min(found.get((mod, target), line), line)
        return read, found


def tarjan(nodes, adj):
    """Strongly connected components, iteratively (no recursion limit to hit)."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    for root in nodes:
        if root in index:
            continue
        work = [(root, None)]
        while work:
            v, it = work.pop()
            if it is None:  # first visit
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
                it = iter(sorted(adj[v]))
            for w in it:
                if w not in index:  # descend; come back to v's iterator afterwards
                    work += [(v, it), (w, None)]
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:  # all successors done
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    comp = [stack.pop()]
                    while comp[-1] != v:
                        comp.append(stack.pop())
                    on_stack.difference_update(comp)
                    comps.append(comp)
    return comps


def shortest_circle(start, members, adj):
    """A shortest way from `start` back to itself inside its component (BFS)."""
    prev, queue = {start: None}, deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(adj[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def name(mod):
    return "main.rs" if mod == MAIN else "::".join(mod) or "crate"


def report(crate, with_tests, folders, strict):
    """Print one crate's summary line and circles; return how many circles."""
    read, edges = crate.edges(with_tests)
    where = {}  # (from, to) -> one example: "line N", or "file:N" when files merge
    if folders:
        nodes = sorted({m[:1] for m in read})
        for (a, b), line in sorted(edges.items()):
            if a[:1] != b[:1]:
                where.setdefault((a[:1], b[:1]), "%s:%d" % (crate.files[a].relative_to(crate.src), line))
    else:
        nodes = sorted(read)
        where = {e: "line %d" % line for e, line in edges.items()}
    adj = {n: set() for n in nodes}
    for a, b in where:
        if strict or folders or not (a[:len(b)] == b or b[:len(a)] == a):
            adj[a].add(b)
    circles = sorted((sorted(c) for c in tarjan(nodes, adj) if len(c) > 1), key=lambda c: (-len(c), c))
    unit = "folders" if folders else "files"
    print("%s (%s): %d %s, %d edges, %d circles, %d %s in them" % (
        crate.dir.name, os.path.relpath(crate.src), len(nodes), unit, sum(map(len, adj.values())), len(circles),
        sum(map(len, circles)), unit))
    for i, comp in enumerate(circles, 1):
        members = set(comp)
        print("  circle %d: %d %s, e.g. %s" % (
            i, len(comp), unit, " -> ".join(map(name, shortest_circle(comp[0], members, adj)))))
        for m in comp:
            print("    " + (name(m) if folders else "%s  (%s)" % (name(m), crate.files[m].relative_to(crate.src))))
            for t in sorted(adj[m] & members):
                print("      -> %s  [%s]" % (name(t), where[(m, t)]))
    return len(circles)


def main():
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description="Find import circles between the modules of each crate.")
    ap.add_argument("crates", nargs="*", help="crate directories (default: domain app server)")
    ap.add_argument("--folders", action="store_true", help="one node per top-level folder (or file) of a crate")
    ap.add_argument("--with-tests", action="store_true", help="count test code too")
    ap.add_argument("--strict", action="store_true", help="count edges between a module and its ancestors")
    args = ap.parse_args()
    total = 0
    for d in map(Path, args.crates or [root / c for c in ("domain", "app", "server")]):
        total += report(Crate(d.parent if d.name == "src" else d), args.with_tests, args.folders, args.strict)
    print("%s-level import circles: %s" % ("folder" if args.folders else "file", total or "none"))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
