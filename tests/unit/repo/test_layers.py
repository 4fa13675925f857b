"""The layers keep their direction, and hub/ has no import cycles.

``hub/`` is a few packages, each allowed to import only those below it
(:data:`MAY_IMPORT`, the table of docs/architecture.md).

Imports are read from the source (every ``import`` statement, including the
ones under ``if TYPE_CHECKING:`` and inside functions), so a cycle cannot hide
behind a lazy import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# Each package and the folder it lives in (the client SDK is its own distribution).
SOURCES = {
    "hub": ROOT,
    "protocol": ROOT,
    "adapters": ROOT,
    "agora_client": ROOT / "clients" / "python",
}
PACKAGES = tuple(SOURCES)


def _source(module: str) -> Path:
    return SOURCES.get(module.split(".")[0], ROOT)


def _module_name(path: Path) -> str:
    base = next(src for pkg, src in SOURCES.items() if path.is_relative_to(src / pkg))
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {
        _module_name(p): p for pkg, src in SOURCES.items() for p in (src / pkg).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            # ``from hub.x import y``: y may be a module or a name in hub.x.
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


GRAPH = _graph()


def _reaches(start: str, banned: tuple[str, ...]) -> list[str]:
    """Modules of the project reachable from ``start`` whose own imports include
    an external package in ``banned`` (or the banned project package itself)."""
    seen, stack, hits = {start}, [start], []
    while stack:
        mod = stack.pop()
        for imported in _imports(_path(mod)):
            if imported.split(".")[0] in banned or imported.startswith(banned):
                hits.append(f"{mod} imports {imported}")
        for nxt in GRAPH.get(mod, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return hits


def test_no_import_cycles_in_hub():
    hub = {
        m: {t for t in ts if t.startswith("hub")} for m, ts in GRAPH.items() if m.startswith("hub")
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in hub.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            # A package's __init__ re-exporting its submodules is not a cycle.
            names = {c for c in component if not any(o.startswith(c + ".") for o in component)}
            if len(names) > 1:
                cycles.append(sorted(component))

    for v in sorted(hub):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_no_import_cycles_between_the_parts_of_hub():
    """Part to part (the node and the adapter host, say), not only module to module."""
    edges: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        part = _part(module)
        if part is None:
            continue
        edges.setdefault(part, set()).update(
            p for t in targets if (p := _part(t)) is not None and p != part
        )
    cycles = []
    for start in edges:
        seen, stack = set(), list(edges[start])
        while stack:
            part = stack.pop()
            if part == start:
                cycles.append(start)
                break
            if part not in seen:
                seen.add(part)
                stack.extend(edges.get(part, ()))
    assert not cycles, f"parts that import themselves through others: {cycles}"


BELOW = ("hub.errors", "hub.core")
#: What each part of ``hub`` may import of ``hub`` (besides itself).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "hub.core": BELOW,
    "hub.config": BELOW,
    "hub.net": (*BELOW, "hub.config"),
    "hub.cluster": (*BELOW, "hub.config"),
    "hub.auth": (*BELOW, "hub.config", "hub.net"),
    "hub.handlers": (*BELOW, "hub.config", "hub.cluster", "hub.auth"),
    "hub.ops": (*BELOW, "hub.config", "hub.net", "hub.cluster", "hub.handlers"),
    "hub.node": (*BELOW, "hub.config", "hub.net", "hub.cluster", "hub.auth", "hub.handlers",
                 "hub.ops", "hub.adapter_host"),
    "hub.adapter_host": (*BELOW, "hub.config", "hub.net", "hub.cluster", "hub.handlers"),
    "hub.process": ("hub",),
}  # fmt: skip


def _part(module: str) -> str | None:
    for part in MAY_IMPORT:
        if module == part or module.startswith(part + "."):
            return part
    return None


def test_every_module_of_the_hub_is_in_a_part():
    loose = [
        m
        for m in GRAPH
        if m.startswith("hub.") and _part(m) is None and m not in ("hub.errors", "hub.__main__")
    ]
    assert not loose, f"modules outside the parts of docs/architecture.md: {loose}"


def test_each_part_imports_only_the_parts_below_it():
    bad = []
    for module, targets in GRAPH.items():
        part = _part(module)
        if part is None:
            continue
        allowed = (part, *MAY_IMPORT[part])
        for target in targets:
            if target.startswith("hub") and target != "hub" and not target.startswith(allowed):
                bad.append(f"{module} imports {target}")
    assert not bad, bad


def test_protocol_imports_nothing_of_the_hub_or_adapters():
    bad = [
        f"{m} imports {t}"
        for m, ts in GRAPH.items()
        if m.startswith("protocol")
        for t in ts
        if t.startswith(("hub", "adapters"))
    ]
    assert not bad, bad


def test_adapters_import_only_their_host_the_protocol_and_adapters():
    """An adapter is written against ``hub.adapter_host`` and nothing else of the hub."""
    bad = [
        f"{m} imports {t}"
        for m, ts in GRAPH.items()
        if m.startswith("adapters")
        for t in ts
        if t.startswith("hub") and t != "hub.adapter_host"
    ]
    assert not bad, bad


def test_the_bridge_kit_imports_no_adapter_package():
    """``adapters.kit`` is what the adapter packages share: they import it, not the reverse."""
    packages = ("adapters.a2a", "adapters.agora_http", "adapters.envelope", "adapters.mcp")
    bad = [
        f"{m} imports {t}"
        for m, ts in GRAPH.items()
        if m.startswith("adapters.kit")
        for t in ts
        if t.startswith(packages)
    ]
    assert any(m.startswith("adapters.kit.") for m in GRAPH)
    assert not bad, bad


def test_the_hub_imports_adapters_only_to_build_them():
    """The node knows adapters only as ``Adapter``s; only the process runner
    builds them from the settings."""
    bad = [
        f"{m} imports {t}"
        for m, ts in GRAPH.items()
        if m.startswith("hub") and m != "hub.process.runner"
        for t in ts
        if t.startswith("adapters")
    ]
    assert not bad, bad


@pytest.mark.parametrize("package", ["hub.core", "hub.net.outbox"])
def test_pure_state_imports_no_io(package):
    modules = [m for m in GRAPH if m == package or m.startswith(package + ".")]
    banned = ("websockets", "redis", "aiohttp", "hub.cluster")
    hits = [hit for m in modules for hit in _reaches(m, banned)]
    assert not hits, hits


def test_the_sdk_imports_nothing_of_the_server():
    """agora_client is installed alone (websockets and orjson only): no module of
    it may import hub, protocol or adapters, not even lazily."""
    bad = [
        f"{m} imports {t}"
        for m in GRAPH
        if m.startswith("agora_client")
        for t in _imports(_path(m))
        if t.split(".")[0] in ("hub", "protocol", "adapters")
    ]
    assert not bad, bad
    assert any(m.startswith("agora_client.cli") for m in GRAPH)  # the whole SDK was read


@pytest.mark.parametrize("module", ["agora_client", "agora_client.cli"])
def test_the_sdk_needs_only_websockets_and_orjson(module):
    """Everything ``import agora_client`` loads needs no package but these (HubAPI's
    aiohttp is an optional extra, imported by agora_client.api alone)."""
    allowed = {"websockets", "orjson", "agora_client", "__future__"}
    hits, seen, stack = [], {module}, [module]
    while stack:
        mod = stack.pop()
        for imported in _imports(_path(mod)):
            top = imported.split(".")[0]
            if top not in allowed and top not in sys.stdlib_module_names:
                hits.append(f"{mod} imports {imported}")
        for nxt in GRAPH.get(mod, ()):
            if nxt not in seen and nxt != "agora_client.api":
                seen.add(nxt)
                stack.append(nxt)
    assert not hits, hits


def _path(module: str) -> Path:
    path = _source(module) / (module.replace(".", "/") + ".py")
    return path if path.exists() else _source(module) / module.replace(".", "/") / "__init__.py"


def test_only_an_adapters_start_sees_the_whole_host():
    """``AdapterHost`` is the bundle handed to ``start(host)`` (and an outbound
    bridge's ``open(host)``): they pass on its parts, and nothing keeps it or
    takes it — every other part of an adapter is typed on the small protocols
    it calls (``AgentHosting``, ``HttpFaces``, ``SpaceReads``, ``SystemSpaces``)."""
    bad = []
    for path in sorted((ROOT / "adapters").rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        allowed: set[int] = set()  # the ``host`` parameter of start/open
        for node in ast.walk(tree):
            if not isinstance(node, ast.AsyncFunctionDef) or node.name not in ("start", "open"):
                continue
            if [a.arg for a in node.args.args] == ["self", "host"]:
                allowed.add(id(node.args.args[1]))
            bad += [
                f"{module}:{kept.lineno} keeps the host"
                for kept in ast.walk(node)
                if isinstance(kept, ast.Assign | ast.AnnAssign)
                and isinstance(kept.value, ast.Name)
                and kept.value.id == "host"
            ]
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and id(node) in allowed:
                continue
            annotation = getattr(node, "annotation", None) or getattr(node, "returns", None)
            if isinstance(node, ast.arg | ast.AnnAssign | ast.FunctionDef | ast.AsyncFunctionDef):
                if annotation is not None and any(
                    isinstance(n, ast.Name) and n.id == "AdapterHost" for n in ast.walk(annotation)
                ):
                    bad.append(f"{module}:{node.lineno} takes the whole host")
    assert not bad, bad
