"""Builds the Python package aps (pyproject.toml): CMake builds the target aps_python, the C++
core aps._aps, and setuptools packages it with python/aps (its Python files, the type stubs
_aps.pyi and py.typed).

    pip install --no-build-isolation .          # into the current environment
    pip wheel --no-build-isolation . -w dist    # a wheel

The CMake configure step takes -DAPS_BUILD_TESTS=OFF -DAPS_WITH_CUDA=OFF and this Python;
APS_CMAKE_ARGS adds (or overrides) arguments, e.g. APS_CMAKE_ARGS="-DAPS_NATIVE=OFF" for a
wheel that runs on other x86-64 CPUs than this one. CMAKE_BUILD_PARALLEL_LEVEL sets the build's
jobs. APS_CMAKE_BUILD_DIR names the CMake build directory (default: one under setuptools'
build directory, build/setuptools); an existing one is built incrementally.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    """The CMake project's version (the same as aps.__version__, from APS_VERSION)."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(aps VERSION ([0-9][0-9.]*)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("APS_CMAKE_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp), "cmake")
        configure = ["cmake", "-S", ROOT, "-B", build_dir]
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")) and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += ["-DAPS_BUILD_TESTS=OFF", "-DAPS_WITH_CUDA=OFF", f"-DPython3_EXECUTABLE={sys.executable}"]
        configure += shlex.split(os.environ.get("APS_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        build = ["cmake", "--build", build_dir, "--target", "aps_python"]
        if self.parallel and "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            build += ["--parallel", str(self.parallel)]
        subprocess.run(build, check=True)
        built = os.path.join(build_dir, "python", "aps", "_aps" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.isfile(built):
            raise RuntimeError(f"setup.py: the CMake build made no {built} (is python3-dev of {sys.executable} and "
                               "pybind11-dev installed? CMake's output above says)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(
    version=version(),
    packages=["aps"],
    package_dir={"aps": "python/aps"},
    package_data={"aps": ["_aps.pyi", "py.typed"]},
    ext_modules=[Extension("aps._aps", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build/setuptools"}},
    zip_safe=False,
)
