"""Maps the top-level folders ir/, frontends/, passes/, backends/ to tilegraph.* subpackages.

Everything else about the distribution is in pyproject.toml; this file only computes the
package list, which pyproject.toml cannot do for remapped folders.
"""
from setuptools import find_packages, setup

PACKAGE_ROOTS = {
    "tilegraph": "tilegraph",
    "tilegraph.ir": "ir",
    "tilegraph.frontends": "frontends",
    "tilegraph.passes": "passes",
    "tilegraph.backends": "backends",
}

packages = []
for package, folder in PACKAGE_ROOTS.items():
    packages.append(package)
    packages += [f"{package}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=PACKAGE_ROOTS)
