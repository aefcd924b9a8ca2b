"""Print the plain modules of our Python packages: those that import neither rclpy nor a module
that does (checked on the import graph of src/, transitively). `make lint` type-checks these.

With --check [NAME...]: exit 1 if one of the named modules (default: every module whose docstring
declares it a "plain module") turns out not to be plain, i.e. a logic module that started to import
rclpy. `make lint` runs the check before mypy, so such a module cannot silently leave mypy's set."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("csr_llm_common", "csr_llm_core", "action_router", "csr_llm_bringup")


def modules() -> dict:
    found = {}
    for package in PACKAGES:
        base = ROOT / "src" / package
        for path in sorted((base / package).rglob("*.py")):
            found[".".join(path.relative_to(base).with_suffix("").parts)] = path
    return found


def imports(name: str, path: Path) -> set:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = name.split(".")[: -node.level]
                base = ".".join(parent + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def plain(found: dict) -> list:
    graph = {name: imports(name, path) for name, path in found.items()}
    ros = {name for name, deps in graph.items()
           if any(d.split(".")[0] in ("rclpy", "launch", "launch_ros") for d in deps)}
    changed = True
    while changed:
        changed = False
        for name, deps in graph.items():
            if name not in ros and deps & ros:
                ros.add(name)
                changed = True
    return [name for name in found if name not in ros]


def declared_plain(found: dict) -> list:
    """Modules whose docstring says they are plain modules (no rclpy)."""
    out = []
    for name, path in found.items():
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        if "plain module" in " ".join(doc.split()).lower():
            out.append(name)
    return out


if __name__ == "__main__":
    found = modules()
    names = plain(found)
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        wanted = sys.argv[2:] or declared_plain(found)
        missing = [n for n in wanted if n not in names]
        if missing:
            print(f"not plain (they import rclpy, directly or through another module): {missing}")
            sys.exit(1)
        sys.exit(0)
    print(" ".join(str(found[n].relative_to(ROOT)) for n in names))
