#!/usr/bin/env python3
"""The PTX surgery of bench/launch_probe_gpu.py, on the CPU: splitting a
module into its entries, and putting Triton's instruction stream under the
generated append's name and parameter list (the probe's peer_body bundles);
and the cold mode's launch order, by which ncu rows are attributed.
Exits 77 (skipped) where the interpreter cannot import the script."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir))
try:
    import launch_probe_gpu as probe
except Exception as e:  # an interpreter too old for the script
    print("skipped: cannot import launch_probe_gpu: %s" % e)
    sys.exit(77)

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n\n"


def entry(name, params, body):
    decl = ",\n".join("\t.param .u64 %s_param_%d" % (name, i)
                      for i in range(params))
    return (".visible .entry %s(\n%s\n)\n.maxntid 128, 1, 1\n{\n%s\n}"
            % (name, decl, body))


# A body with an instruction that carries braces of its own, as Triton's
# vector loads do: the entry must not end at its closing brace.
APPEND = entry("app", 21, "\tld.param.b64 \t%rd1, [app_param_2];\n"
               "\tld.global.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd1];\n\tret;")
OTHER = entry("app_scalar", 21, "\tret;")
PEER = (".version 8.7\n.target sm_90a\n.address_size 64\n\n" +
        entry("tri", 16,
              "$L__func_begin0:\n\t.loc\t1 70 22\n"
              "\tld.param.b64 \t%rd8, [tri_param_4];\n"
              "\tld.param.b32 \t%r1, [tri_param_12];\n"
              "\tld.global.v4.b32 { %r9, %r10 }, [ %rd8 + 0 ];\n\tret;")
        .replace(".maxntid 128, 1, 1", ".reqntid 128"))


class PtxEntries(unittest.TestCase):
    def test_splits_every_entry_past_braced_instructions(self):
        header, entries = probe.ptx_entries(
            HEADER + APPEND + "\n\n" + OTHER + "\n")
        self.assertEqual(header, HEADER)
        self.assertEqual([n for n, _ in entries], ["app", "app_scalar"])
        self.assertEqual(entries[0][1], APPEND)
        self.assertEqual(entries[1][1], OTHER)


class PeerBody(unittest.TestCase):
    def test_renames_parameters_to_the_appends(self):
        text = probe.peer_body_entry(PEER, APPEND, "app")
        # The append's declaration and directives, Triton's instructions
        # with its slot pointer (4) and cache stride (12) renamed to the
        # append's slot_mapping (2) and key_cache_stride_pos (15).
        self.assertTrue(text.startswith(".visible .entry app(\n"))
        self.assertIn(".maxntid 128, 1, 1", text)
        self.assertNotIn(".reqntid", text)
        self.assertIn("[app_param_2]", text)
        self.assertIn("[app_param_15]", text)
        self.assertNotIn("tri_param", text)
        self.assertNotIn(".loc", text)
        self.assertNotIn("$L__func_begin0", text)
        self.assertIn("ld.global.v4.b32 { %r9, %r10 }", text)

    def test_refuses_a_parameter_without_a_match(self):
        scale = PEER.replace("[tri_param_12]", "[tri_param_5]")
        with self.assertRaisesRegex(ValueError, "parameter 5"):
            probe.peer_body_entry(scale, APPEND, "app")


NCU_HEAD = ('"ID","Kernel Name","launch__grid_size","gpu__time_duration.sum"\n'
            '"","","","nsecond"\n')


def ncu_csv(tmp, rows):
    path = os.path.join(tmp, "ncu.csv")
    with open(path, "w") as f:
        f.write("==PROF== Connected to process\n" + NCU_HEAD)
        for i, (kernel, grid, ns) in enumerate(rows):
            f.write('"%d","%s","%s","%s"\n' % (i, kernel, grid, ns))
    return path


class ColdAttribution(unittest.TestCase):
    def test_launch_order_rotates_every_repetition(self):
        # The warm-ups, then each launcher in every place once.
        self.assertEqual(probe.cold_launch_order(["a", "b", "c"], 3),
                         ["a", "b", "c", "a", "b", "c", "b", "c", "a",
                          "c", "a", "b"])

    def test_rows_go_to_the_launcher_that_made_them(self):
        import tempfile
        names = ["kvgen", "peer"]
        seq = ["peer"] + names + probe.cold_launch_order(names, 4)
        record = {"rows": [{"tokens": 32, "launches": seq,
                            "skip": 1 + 2 * len(names)}]}
        # Warm-ups and checks at 9000 ns; then kvgen 3,200 and the peer
        # 3,100, in the order launched (thousands separators included).
        times = {"kvgen": '"3,200"', "peer": '"3,100"'}
        rows = [("k", 32, 9000)] * 5 + [
            ("k", 32, times[n]) for n in seq[5:]]
        with tempfile.TemporaryDirectory() as tmp:
            path = ncu_csv(tmp, [(k, g, str(ns).strip('"'))
                                 for k, g, ns in rows])
            got = probe.attribute_ncu(probe.ncu_rows(path), record)
        self.assertEqual(got, {32: {"kvgen": [3200.0] * 4,
                                    "peer": [3100.0] * 4}})

    def test_refuses_rows_that_do_not_match_the_record(self):
        record = {"rows": [{"tokens": 1, "launches": ["a", "a", "a"],
                            "skip": 1}]}
        rows = [("k", 1, 1.0)] * 2
        with self.assertRaisesRegex(ValueError, "end before"):
            probe.attribute_ncu(rows, record)
        with self.assertRaisesRegex(ValueError, "past the record"):
            probe.attribute_ncu(rows * 2, record)
        record["rows"][0]["us"] = {"a": 1.0}
        with self.assertRaisesRegex(ValueError, "graph samples"):
            probe.attribute_ncu(rows * 2, record)

    def test_refuses_a_file_that_is_not_ncu_csv(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.csv")
            with open(path, "w") as f:
                f.write("cold    1: kvgen 1.0\n")
            with self.assertRaisesRegex(ValueError, "Kernel Name"):
                probe.ncu_rows(path)
            with open(path, "w") as f:
                f.write('"ID","Kernel Name","gpu__time_duration.sum"\n')
            with self.assertRaisesRegex(ValueError, "launch__grid_size"):
                probe.ncu_rows(path)

    def test_attribution_needs_the_record(self):
        with self.assertRaises(SystemExit) as exit:
            probe.main(["--attribute-ncu", "x.csv"])
        self.assertEqual(exit.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
