"""Print the plain modules of our Python packages: those that import neither rclpy nor a module
that does (checked on the import graph of src/, transitively). `make lint` type-checks these.

With --check NAME...: exit 1 if one of the named modules turns out not to be plain (a logic module
that started to import rclpy)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("csr_llm_core", "action_router", "csr_llm_bringup")


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


if __name__ == "__main__":
    found = modules()
    names = plain(found)
    if len(sys.argv) > 2 and sys.argv[1] == "--check":
        missing = [n for n in sys.argv[2:] if n not in names]
        if missing:
            print(f"not plain (they import rclpy, directly or through another module): {missing}")
            sys.exit(1)
        sys.exit(0)
    print(" ".join(str(found[n].relative_to(ROOT)) for n in names))
