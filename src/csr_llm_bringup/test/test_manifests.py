"""Each package.xml declares the ROS packages its code imports (rosdep installs nothing else): the
runtime's as exec_depend, the tests' as test_depend (or exec_depend)."""
import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2]
PACKAGES = ("csr_llm_common", "csr_llm_core", "action_router", "csr_llm_bringup")
# ROS packages that are pure Python and not installable where `make test` runs
NOT_INSTALLED_HERE = {"launch", "launch_ros", "launch_testing", "launch_testing_ros", "launch_pytest"}


def _ament_packages() -> set:
    import ament_index_python
    return set(ament_index_python.get_packages_with_prefixes()) | set(PACKAGES) | {"csr_llm_msgs"} | NOT_INSTALLED_HERE


def _imported(folder: Path) -> set:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def _declared(package: str, *tags: str) -> set:
    root = ET.parse(SRC / package / "package.xml").getroot()
    return {element.text.strip() for tag in tags for element in root.iter(tag)}


@pytest.mark.parametrize("package", PACKAGES)
def test_the_manifest_declares_every_ros_package_the_code_imports(package):
    ros = _ament_packages()
    runtime = (_imported(SRC / package / package) | _imported(SRC / package / "launch")) & ros - {package}
    assert runtime - _declared(package, "exec_depend", "depend") == set()
    tests = _imported(SRC / package / "test") & ros - {package}
    assert tests - _declared(package, "exec_depend", "depend", "test_depend") == set()
