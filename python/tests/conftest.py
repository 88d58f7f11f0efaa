"""Shared setup: libkvrt and the compiler from the build tree (or the
environment), and a fresh kernel cache for the session."""

import os
import shutil

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))
BUILD = os.environ.get("KVGEN_BUILD_DIR", os.path.join(ROOT, "build"))


def _compiler():
    env = os.environ.get("KVGEN_COMPILER")
    if env:
        return env
    path = os.path.join(BUILD, "bin", "kvgen")
    return path if os.access(path, os.X_OK) else shutil.which("kvgen")


COMPILER = _compiler()
if COMPILER:
    os.environ["KVGEN_COMPILER"] = COMPILER
else:
    # An installed wheel: its own compiler, found with no variable set.
    import kvgen

    COMPILER = kvgen.find_compiler()
os.environ.setdefault("KVGEN_BUILD_DIR", BUILD)


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    """Every test compiles into (and finds in) a cache of its own session,
    unless KVGEN_CACHE_DIR names one (the GPU run's precompiled cache)."""
    if os.environ.get("KVGEN_CACHE_DIR"):
        yield os.environ["KVGEN_CACHE_DIR"]
        return
    path = str(tmp_path_factory.mktemp("kvgen-cache"))
    old = os.environ.get("KVGEN_CACHE_DIR")
    os.environ["KVGEN_CACHE_DIR"] = path
    yield path
    if old is None:
        os.environ.pop("KVGEN_CACHE_DIR", None)
    else:
        os.environ["KVGEN_CACHE_DIR"] = old


@pytest.fixture
def compiler_path():
    if not COMPILER:
        pytest.skip("no kvgen compiler (KVGEN_COMPILER, build/bin/kvgen, PATH)")
    return COMPILER
