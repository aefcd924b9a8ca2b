from setuptools import find_packages, setup

PACKAGE = "action_router"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Three-level action router over a physically invalidated three-layer cache",
    license="Apache-2.0",
    packages=find_packages(exclude=["test"]),
    package_data={PACKAGE: ["data/*.npz"]},     # the depth CNN's weights (depth_cnn.py)
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
    ],
    python_requires=">=3.10",
    # rclpy and the ROS message packages come from the ROS install (or the ros-* wheels).
    install_requires=["setuptools", "numpy", "PyYAML", "threadpoolctl"],
    extras_require={"test": ["pytest", "hypothesis"]},
    zip_safe=False,
    entry_points={"console_scripts": [
        "router_node = action_router.router_node:main",
        "router_bench = action_router.lab.bench:main",
    ]},
)
