"""The repository's layout rules, checked on the import graph of src/ (no imports executed):
runtime modules never import the lab, the router's package never needs llama.cpp (csr_llm_core)."""
import ast
from pathlib import Path
from typing import Dict, Set

SRC = Path(__file__).resolve().parents[2]
PACKAGES = ("csr_llm_common", "csr_llm_core", "action_router", "csr_llm_bringup")


def _modules() -> Dict[str, Path]:
    found = {}
    for package in PACKAGES:
        base = SRC / package
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> Set[str]:
    out = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = name.split(".")
                parent = parent[: len(parent) - node.level + (1 if is_package else 0)]
                base = ".".join(parent + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _is_lab(name: str) -> bool:
    return "lab" in name.split(".")


def test_runtime_modules_import_nothing_from_the_lab():
    modules = _modules()
    offenders = {name: sorted(d for d in _imports(name, path) if _is_lab(d))
                 for name, path in modules.items() if not _is_lab(name)}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"runtime modules importing lab modules: {offenders}"


def test_the_router_and_the_common_package_do_not_need_the_reasoning_package():
    modules = _modules()
    for name, path in modules.items():
        top = name.split(".")[0]
        if top not in ("action_router", "csr_llm_common") or _is_lab(name):
            continue
        bad = sorted(d for d in _imports(name, path) if d.split(".")[0] in ("csr_llm_core", "csr_llm_bringup"))
        assert not bad, f"{name} imports {bad}: {top} must install without llama.cpp"


def test_the_layout_check_sees_the_lab():
    modules = _modules()
    assert _is_lab("csr_llm_core.lab.bench_ttft") and not _is_lab("csr_llm_core.reasoner")
    assert "csr_llm_core.lab.bench_ttft" in modules and "action_router.router" in modules


MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80


def _sizes(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, node.end_lineno - node.lineno + 1


def test_no_class_over_300_lines_no_function_over_80_no_mixins():
    too_long, mixins = [], []
    for name, path in _modules().items():
        for node, lines in _sizes(path):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if lines > limit:
                too_long.append(f"{name}.{node.name}: {lines} lines")
            if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin"):
                mixins.append(f"{name}.{node.name}")
    assert not too_long, "split these into parts: " + "; ".join(too_long)
    assert not mixins, f"mixins share another class's attributes; use parts: {mixins}"
