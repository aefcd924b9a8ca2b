from setuptools import find_packages, setup

PACKAGE = "csr_llm_common"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Shared parts of CSR-LLM without llama.cpp: catalogue, robot description, faults, ROS plumbing",
    license="Apache-2.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
    ],
    python_requires=">=3.10",
    # rclpy and the ROS message packages come from the ROS install (or the ros-* wheels).
    install_requires=["setuptools", "numpy", "PyYAML"],
    extras_require={"test": ["pytest"]},
    zip_safe=False,
)
