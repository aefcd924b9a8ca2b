from glob import glob

from setuptools import find_packages, setup

PACKAGE = "csr_llm_bringup"
# The workspace's config/ (profiles, node parameters, scenarios) ships in this package's share
# directory, where csr_llm_common.paths finds it on an installed (colcon) workspace.
CONFIG = "../../config"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Node graph, launch files, runner, MuJoCo simulator and bag record/replay",
    license="Apache-2.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/launch", glob("launch/*.launch.py")),
        ("share/" + PACKAGE + "/config", glob(CONFIG + "/*.yaml")),
        ("share/" + PACKAGE + "/config/scenarios", glob(CONFIG + "/scenarios/*.yaml")),
        ("share/" + PACKAGE + "/config/gazebo", glob(CONFIG + "/gazebo/*")),
    ],
    python_requires=">=3.10",
    # rclpy and the ROS message packages come from the ROS install (or the ros-* wheels).
    install_requires=["setuptools", "PyYAML", "numpy", "mujoco-core", "rosbags>=0.11"],
    extras_require={"test": ["pytest", "hypothesis"]},
    zip_safe=False,
    entry_points={"console_scripts": [
        "csr-llm = csr_llm_bringup.cli:main",
        "recorder_node = csr_llm_bringup.recorder_node:main",
        "simulator_node = csr_llm_bringup.sim.simulator_node:main",
    ]},
)
