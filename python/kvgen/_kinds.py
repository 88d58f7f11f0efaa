"""The kernel kinds, as the package asks of them.

Each kind's traits (include/kvgen/ABI/KernelKinds.def), its launch (kvrt.h's
entry point and args struct) and the parameters of its tensors
(include/kvgen/ABI/Params.def) come from the compiled binding's KINDS table
(python/src/kvext.c), which the C compiler builds from those files. The
package asks these traits instead of naming kinds, so that a new kind is
launched (kvgen.Bundle's method of its name), described and documented
without a line here.
"""

import threading

from . import _ext

_lock = threading.Lock()
_kinds = None


class Kind:
    """One kernel kind.

    name: the kind's name ("append"); index: its number in KernelKinds.def,
    as the binding takes it; rows: "Into" (rows from a source into the
    cache), "OutOf" (rows out of the cache) or "None"; slot: "Mapping",
    "BlockTable" or "PageTable"; entry: what a cache entry holds, "KV",
    "Latent" or "None"; entry_point: kvrt's C function ("kvrt_append");
    method: kvgen.Bundle's method (the entry point without "kvrt_");
    has_variant: whether a launch picks a variant; tensors: the args
    struct's tensors, in its order; optional: those that only a quantized
    description or one with a fused prologue takes (keyword arguments of
    the method); prologue: those of a fused prologue; writes: the tensors
    the kernel writes; stream_tensor: the index of the tensor whose
    framework gives the launch's stream (the rows' source for a kind that
    moves rows into the cache, else the first tensor it writes).
    """

    __slots__ = ("index", "name", "rows", "slot", "entry", "entry_point",
                 "method", "has_variant", "tensors", "optional", "prologue",
                 "writes", "stream_tensor")

    def __init__(self, index, row):
        (self.name, self.rows, self.slot, self.entry, self.entry_point,
         self.has_variant, tensors, params, writes) = row
        self.index = index
        self.tensors = tuple(tensors)
        when = {name: w for name, role, w in params if role == "Buffer"}
        if tuple(when) != self.tensors:
            # kvrt.h's struct and Params.def name one kind's tensors apart.
            raise RuntimeError(
                "kvgen._kvext: %s's tensors (%s) are not kind %s's buffers "
                "(%s)" % (self.entry_point, ", ".join(self.tensors), self.name,
                          ", ".join(when)))
        # Keyword arguments: the scales (a quantized description's) and a
        # fused prologue's tensors (When Prologue...), named as kvrt's
        # fields.
        self.optional = tuple(t for t in self.tensors
                              if when[t].startswith(("Quant", "Prologue")))
        self.prologue = tuple(t for t in self.tensors
                              if when[t].startswith("Prologue"))
        self.writes = tuple(w for w in writes if w in self.tensors)
        self.method = self.entry_point[len("kvrt_"):]
        self.stream_tensor = (0 if self.rows == "Into" else
                              self.tensors.index(self.writes[0]))

    def __repr__(self):
        return "<kvgen kind %s>" % self.name


def all_kinds():
    """Every kind, in KernelKinds.def's order."""
    global _kinds
    if _kinds is None:
        with _lock:
            if _kinds is None:
                _kinds = tuple(Kind(i, row)
                               for i, row in enumerate(_ext.kinds()))
    return _kinds


def by_name(name):
    """The kind named `name`, or None."""
    for kind in all_kinds():
        if kind.name == name:
            return kind
    return None


def by_method(method):
    """The kind whose kvgen.Bundle method is `method`, or None."""
    for kind in all_kinds():
        if kind.method == method:
            return kind
    return None
