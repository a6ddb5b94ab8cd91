"""The package's import graph between its top-level parts, as a Mermaid diagram (docs/DESIGN.md).

Every import counts (inside functions and under TYPE_CHECKING too: grimp sees them all). Edges are
reduced to the ones no longer path implies, so the drawing shows the layers and nothing twice.
``tests/test_house.py`` checks that docs/DESIGN.md holds this script's current output.

    python scripts/import_graph.py            # print the diagram
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's package, not an installed one

PACKAGE = "marlin_demo"


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def edges() -> dict[str, set[str]]:
    graph = grimp.build_graph(PACKAGE)
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        if not module.startswith(PACKAGE + "."):
            continue
        src = unit(module)
        out.setdefault(src, set())
        for target in graph.find_modules_directly_imported_by(module):
            if target.startswith(PACKAGE + ".") and unit(target) != src:
                out[src].add(unit(target))
    return out


def reduced(full: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop an edge a -> c when another path a -> b -> ... -> c exists (the graph has no cycle)."""

    def reach(start: str, skip: tuple[str, str]) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            node = todo.pop()
            for nxt in full.get(node, ()):
                if (node, nxt) == skip or nxt in seen:
                    continue
                seen.add(nxt)
                todo.append(nxt)
        return seen

    return {a: {c for c in targets if c not in reach(a, (a, c))} for a, targets in full.items()}


def mermaid() -> str:
    lines = ["graph TD"]
    for src, targets in sorted(reduced(edges()).items()):
        lines += [f"  {src} --> {dst}" for dst in sorted(targets)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(mermaid() + "\n")
