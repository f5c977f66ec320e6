# SPDX-License-Identifier: Apache-2.0
"""pip install ./python: builds loom._native with CMake against an installed
Loom (the loom and libloom-dev packages, or a prefix in CMAKE_PREFIX_PATH),
for this interpreter, offline. Under Debian's externally managed Python, in
a virtual environment made with --system-site-packages (to see python3-torch):

    python3 -m venv --system-site-packages venv && venv/bin/pip install ./python
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    top = os.path.join(HERE, "..", "CMakeLists.txt")
    if os.path.exists(top):
        with open(top) as f:
            m = re.search(r"project\(Loom VERSION ([0-9.]+)", f.read())
            if m:
                return m.group(1)
    return "0.1.0"


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = os.path.abspath(os.path.dirname(self.get_ext_fullpath(ext.name)))
        build = os.path.abspath(self.build_temp)
        # The interpreter pip runs may be a venv's: name the base one, whose
        # site-packages hold pybind11's CMake files; the module works in both.
        python = os.path.realpath(sys.executable)
        configure = ["cmake", "-S", HERE, "-B", build, f"-DLOOM_PYTHON={python}",
                     f"-DLOOM_PYTHON_OUTPUT_DIR={out}", "-DCMAKE_BUILD_TYPE=Release"]
        if shutil.which("ccache"):  # a rebuild (another venv, CI) is then a cache hit
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build, "--target", "loom_python_native",
                               "-j", str(min(4, os.cpu_count() or 1))])


setup(
    name="loom",
    version=version(),
    description="A swarm optimizer for any PyTorch training loop, backed by Loom's native swarm",
    license="Apache-2.0",
    packages=["loom"],
    ext_modules=[CMakeExtension("loom._native")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
