"""The repository's layout rules, checked on the import graph of src/ (no imports executed):
runtime modules never import the lab, the router's package never needs llama.cpp (csr_llm_core),
no class over 300 lines, no function over 80, no mixins."""
import ast
import importlib.util
from pathlib import Path
from typing import Dict, Set

SRC = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("plain_modules", SRC.parent / "tools" / "plain_modules.py")
plain_modules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain_modules)


def _modules() -> Dict[str, Path]:
    """Every module of our Python packages by dotted name (a package's own __init__ under its name)."""
    return {name.removesuffix(".__init__"): path for name, path in plain_modules.modules().items()}


def _imports(name: str, path: Path) -> Set[str]:
    as_listed = f"{name}.__init__" if path.name == "__init__.py" else name
    return plain_modules.imports(as_listed, path)


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
    # relative imports resolve: the lab's `from ..engine import LlamaEngine`
    assert "csr_llm_core.engine" in _imports("csr_llm_core.lab.bench_ttft", modules["csr_llm_core.lab.bench_ttft"])


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
