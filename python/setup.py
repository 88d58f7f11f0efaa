"""Builds the pure-Python kvgen package. With KVGEN_KVRT_LIB set to a built
libkvrt at build time, the library is copied into the package (kvgen/lib/),
where the package finds it first: such a wheel is for that platform."""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("KVGEN_KVRT_LIB")
        if not lib:
            return
        if not os.path.isfile(lib):
            raise SystemExit("KVGEN_KVRT_LIB=%s is not a file" % lib)
        dest = os.path.join(self.build_lib, "kvgen", "lib")
        os.makedirs(dest, exist_ok=True)
        shutil.copyfile(os.path.realpath(lib), os.path.join(dest, "libkvrt.so"))


setup(cmdclass={"build_py": BuildPy})
