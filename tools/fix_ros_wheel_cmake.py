"""Point the ROS 2 wheels' CMake exports at this interpreter.

The ros-* wheels are built on manylinux and their share/*/cmake/*.cmake files hard-code
/opt/python/cp311-cp311/include/python3.11 and a numpy include dir under /opt/python. Building
our messages against them needs this interpreter's include dirs instead. Safe to re-run: files
already rewritten contain nothing to replace.
"""
import pathlib
import re
import sys
import sysconfig

import numpy

PYTHON_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+/include/python3\.\d+")
NUMPY_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+/lib/python3\.\d+/site-packages/numpy/(?:_?core)/include")


def main(prefix: str) -> int:
    python_include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    rewritten = 0
    for path in sorted(pathlib.Path(prefix, "share").glob("*/cmake/*.cmake")):
        text = path.read_text()
        new = PYTHON_INCLUDE.sub(python_include, text)
        new = NUMPY_INCLUDE.sub(numpy_include, new)
        if new != text:
            path.write_text(new)
            rewritten += 1
    print(f"[setup] ROS wheel cmake exports: {rewritten} file(s) rewritten to {python_include}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else sys.prefix))
