"""No import circles inside guardrail/, verifiers/ and arena/: a module graph walked with grimp (which
import-linter installs), so a circle that comes back fails here with its path.

Every import counts, at module level, inside a function or under TYPE_CHECKING: a function-level import that
dodges a circle at run time still ties the two modules together. One kind of edge is left out: a package's
`__init__` importing its own submodules (to register them or to re-export their names) is the package's own
front door, not a circle between two modules of code.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("guardrail", "verifiers", "arena")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _edges(graph) -> dict[str, set[str]]:
    mods = set(graph.modules)
    out = {}
    for m in mods:
        out[m] = {t for t in graph.find_modules_directly_imported_by(m)
                  if t in mods and not t.startswith(m + ".")}  # a package importing its own submodules
    return out


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_module_imports_back_a_module_that_imports_it(graph):
    circles = _circles(_edges(graph))
    described = []
    for comp in circles:
        chain = graph.find_shortest_chain(importer=comp[0], imported=comp[1]) or ()
        back = graph.find_shortest_chain(importer=comp[1], imported=comp[0]) or ()
        described.append(f"{' -> '.join(chain)} and back {' -> '.join(back)} (all: {', '.join(comp)})"
                         if chain and back else ", ".join(comp))
    assert not circles, "import circles:\n" + "\n".join(described)


def test_the_check_finds_a_circle_when_there_is_one():
    """The negative control: two modules that import each other, and one through a third, are found."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"p": {"p.x"}, "p.x": set()}) == []
