"""Placeholders for names that the test helpers import but the cache test
never uses."""


class StandinMissing(NotImplementedError):
    """A name of vLLM's that the stand-in does not implement."""


def placeholder(qualname):
    """A callable that raises StandinMissing naming `qualname` when used."""

    def missing(*args, **kwargs):
        raise StandinMissing(
            "%s is not part of the vLLM stand-in (python/tests/vllm_compat): "
            "only what vLLM's cache test uses is" % qualname)

    missing.__name__ = qualname.rsplit(".", 1)[-1]
    missing.__qualname__ = qualname
    return missing


class PlaceholderNamespace:
    """An object whose every attribute is a placeholder."""

    def __init__(self, qualname):
        self._qualname = qualname

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder("%s.%s" % (self._qualname, name))
