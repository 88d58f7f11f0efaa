"""The manifest keys the package reads are keys of the bundle schema.

include/kvgen/ABI/Bundle.def is the one definition of the bundle's manifest:
kvgen writes it and kvrt reads it through that file. The package reads a few
keys of its own (kvgen.Bundle's kernels, the disk cache's check of an entry);
this test reads the schema and the package's source and fails when the
package reads a key the schema does not have, e.g. one renamed in the
schema but not here. It needs the source tree (not an installed wheel).
"""

import ast
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir))
SCHEMA = os.path.join(ROOT, "include", "kvgen", "ABI", "Bundle.def")
PACKAGE = os.path.join(ROOT, "python", "kvgen")

pytestmark = pytest.mark.skipif(not os.path.exists(SCHEMA),
                                reason="needs the kvgen source tree")

# Where the package reads a bundle's manifest: whole modules, or
# (module, functions) where the module also reads other JSON (the disk
# cache's own manifest.json).
READERS = [
    ("bundle.py", None),
    ("_load_checks.py", None),
    ("_disk_cache.py", ("_artifact_problem", "_bundle_problem")),
]

# String subscripts and .get() keys in those places that are not manifest
# keys, with why.
NOT_MANIFEST = {
    "torch",  # sys.modules["torch"]
}


def schema_keys():
    """{object: {key, ...}} from Bundle.def."""
    fields = {}
    with open(SCHEMA) as f:
        for obj, key in re.findall(
                r"^KVGEN_BUNDLE_FIELD\((\w+),\s*(\w+),", f.read(), re.M):
            fields.setdefault(obj, set()).add(key)
    return fields


def read_keys(tree):
    """String constants used as x["key"], x.get("key", ...) or listed in a
    module-level tuple of field names (_INT_FIELDS)."""
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value,
                                                              str):
                keys.add(index.value)
        elif (isinstance(node, ast.Call) and
              isinstance(node.func, ast.Attribute) and
              node.func.attr in ("get", "pop") and node.args and
              isinstance(node.args[0], ast.Constant) and
              isinstance(node.args[0].value, str)):
            keys.add(node.args[0].value)
    return keys


def package_reads():
    """{key: [where, ...]} of every manifest key the package reads."""
    reads = {}
    for module, functions in READERS:
        with open(os.path.join(PACKAGE, module)) as f:
            tree = ast.parse(f.read())
        parts = [tree]
        if functions:
            parts = [n for n in tree.body
                     if isinstance(n, ast.FunctionDef) and
                     n.name in functions]
            assert {n.name for n in parts} == set(functions), module
            # The field names the disk cache compares.
            parts += [n for n in tree.body if isinstance(n, ast.Assign) and
                      any(getattr(t, "id", "") == "_INT_FIELDS"
                          for t in n.targets)]
        for part in parts:
            keys = read_keys(part)
            if isinstance(part, ast.Assign):
                keys = {e.value for e in part.value.elts}
            for key in keys:
                reads.setdefault(key, []).append(module)
    return reads


def test_the_schema_parses():
    fields = schema_keys()
    assert set(fields) == {"root", "target", "kernel", "cache", "latent",
                           "inline_scales", "nvfp4", "quant", "prologue",
                           "launch"}
    assert "min_tokens" in fields["kernel"]


def test_the_package_reads_only_schema_keys():
    known = set().union(*schema_keys().values())
    reads = package_reads()
    # The scan finds what it should: a key read in each place.
    for key in ("kernels", "chip", "layout", "block_size"):
        assert key in reads, key
    unknown = {k: w for k, w in reads.items()
               if k not in known and k not in NOT_MANIFEST}
    assert not unknown, (
        "the package reads manifest keys that include/kvgen/ABI/Bundle.def "
        "does not have: %s" % unknown)


def test_the_fuzzer_dictionary_has_every_schema_key():
    with open(os.path.join(ROOT, "fuzz", "bundle.dict")) as f:
        words = set(re.findall(r'^"\\"(\w+)\\""$', f.read(), re.M))
    missing = set().union(*schema_keys().values()) - words
    assert not missing, "fuzz/bundle.dict lacks %s" % sorted(missing)
