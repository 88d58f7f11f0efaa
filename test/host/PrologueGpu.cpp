//===- PrologueGpu.cpp - the fused prologue's kernels on a CUDA device ----===//
//
// The GPU half of kvgen-prologue-suite, for a machine with a CUDA driver and
// no MLIR: it links the reference, the cases and the driver loader only.
// `kvgen-prologue-suite --emit-gpu=DIR` (where kvgen is built) writes each
// description's PTX and DIR/prologue.manifest (each kernel's plan and the
// seed of its inputs); this reads DIR, draws each kernel's inputs from its
// seed exactly as the suite does, poisons both caches and q_out, launches
// the kernel on device 0 with the plan's grid, and compares every byte with
// the reference.
//
//   kvgen-prologue-gpu DIR               run every kernel of DIR's manifest;
//                                        exit 77 where there is no device
//   kvgen-prologue-gpu --self-test DIR   no device: checks that the
//                                        comparison catches a wrong byte,
//                                        and that every kernel of DIR would
//                                        fail if it wrote nothing
//
// Everything in DIR is checked (the manifest, each description is one of
// this build's cases, each PTX file is there) before the device is opened:
// a stage from other sources is refused, not run against other inputs.
//
//===----------------------------------------------------------------------===//

#include "PrologueCases.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace kvgen;
using namespace kvgen::prologue;

namespace {

struct Loaded {
  const Case *c;
  const Manifest::Description *entry;
  std::string ptx;
};

/// Reads and checks DIR; "" or why it cannot be run.
std::string load(const std::string &dir, const std::vector<Case> &all,
                 Manifest &manifest, std::vector<Loaded> &loaded) {
  if (std::string why = readManifest(dir + "/" + kManifestName, manifest);
      !why.empty())
    return why;
  std::map<std::string, const Case *> byName;
  for (const Case &c : all)
    byName[c.desc.name] = &c;
  for (const Manifest::Description &d : manifest.descriptions) {
    auto it = byName.find(d.name);
    if (it == byName.end())
      return "description " + d.name +
             " is not one of this build's cases (a stage from other sources?)";
    if (d.kernels.empty())
      return "description " + d.name + " has no kernel";
    std::ifstream in(dir + "/" + d.ptx, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty())
      return "cannot read " + dir + "/" + d.ptx + " (the PTX of " + d.name +
             ")";
    loaded.push_back({it->second, &d, text.str()});
  }
  return "";
}

/// The comparison and the check, without a device. Returns the number of
/// expectations that did not hold.
int selfTest(const std::vector<Loaded> &loaded) {
  int wrong = 0;
  auto expect = [&](bool ok, const std::string &what) {
    if (!ok) {
      std::cerr << "self-test FAIL: " << what << "\n";
      ++wrong;
    }
  };
  using conformance::DType;
  std::vector<uint8_t> want(64 * 2);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = static_cast<uint8_t>(i * 7 + 1);
  expect(!compareBytes("same", want, want, DType::BF16),
         "equal buffers compare equal");
  // One byte of one element, at each end and in the middle: the high byte
  // of the last element is the one a loop stepping by the wrong width, or
  // stopping one element short, would skip.
  for (size_t at : {size_t(0), want.size() / 2 + 1, want.size() - 1}) {
    std::vector<uint8_t> got = want;
    got[at] ^= 0x40;
    std::optional<std::string> why =
        compareBytes("key_cache", got, want, DType::BF16);
    expect(why && why->find("1 elements differ: [" + std::to_string(at / 2) +
                            "]") != std::string::npos,
           "a byte changed at " + std::to_string(at) + " is reported (" +
               why.value_or("nothing") + ")");
  }
  std::vector<uint8_t> shorter(want.begin(), want.end() - 2);
  expect(compareBytes("q_out", shorter, want, DType::BF16).has_value(),
         "a buffer of another size is reported");

  // A kernel that writes nothing (the poisoned buffers come back as they
  // went) fails: the reference writes into each cache, and q_out where the
  // description has Q heads.
  for (const Loaded &l : loaded)
    for (const Manifest::Entry &e : l.entry->kernels) {
      bool launched = false;
      Launcher nothing = [&](const Kernel &, int64_t, std::vector<HostBuffer> &,
                             std::vector<int32_t> &,
                             const std::vector<bool> &) {
        launched = true;
        return std::string();
      };
      std::vector<std::string> failures =
          check(*l.c, e.kernel, e.seed, nothing);
      std::string all;
      for (const std::string &f : failures)
        all += f + "; ";
      bool q = l.c->spec.qHeads > 0;
      expect(launched && all.find("key_cache:") != std::string::npos &&
                 all.find("value_cache:") != std::string::npos &&
                 (all.find("q_out:") != std::string::npos) == q,
             e.kernel.name +
                 ": a kernel that writes nothing fails on each "
                 "buffer the reference writes (got: " +
                 all + ")");
    }
  return wrong;
}

} // namespace

int main(int argc, char **argv) {
  std::string dir;
  bool self = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--self-test")
      self = true;
    else if (dir.empty() && !arg.empty() && arg[0] != '-')
      dir = arg;
    else
      dir.clear(), argc = -1;
  }
  if (dir.empty() || argc < 0) {
    std::cerr << "usage: kvgen-prologue-gpu [--self-test] DIR\n"
                 "  DIR: written by kvgen-prologue-suite --emit-gpu=DIR\n";
    return 2;
  }
  std::vector<Case> all = cases();
  Manifest manifest;
  std::vector<Loaded> loaded;
  if (std::string why = load(dir, all, manifest, loaded); !why.empty()) {
    std::cerr << "kvgen-prologue-gpu: " << why << "\n";
    return 1;
  }
  int kernels = 0;
  for (const Loaded &l : loaded)
    kernels += static_cast<int>(l.entry->kernels.size());

  if (self) {
    int wrong = selfTest(loaded);
    std::cout << "kvgen-prologue-gpu --self-test: " << loaded.size()
              << " descriptions, " << kernels << " kernels, " << wrong
              << " failed\n";
    return wrong == 0 ? 0 : 1;
  }

  CudaDriver cu;
  if (std::string why = cu.init(); !why.empty()) {
    std::cout << "SKIPPED: kvgen-prologue-gpu: " << why << "\n";
    return 77;
  }
  int runs = 0, failed = 0;
  for (const Loaded &l : loaded) {
    CudaDriver::Handle module = nullptr;
    if (cu.cuModuleLoadData(&module, l.ptx.c_str()) != 0) {
      std::cerr << "FAIL " << l.c->desc.name << ": the driver refuses "
                << l.entry->ptx << "\n";
      failed += static_cast<int>(l.entry->kernels.size());
      runs += static_cast<int>(l.entry->kernels.size());
      continue;
    }
    for (const Manifest::Entry &e : l.entry->kernels) {
      ++runs;
      std::vector<std::string> failures =
          check(*l.c, e.kernel, e.seed, gpuLauncher(cu, module));
      if (failures.empty())
        continue;
      ++failed;
      std::cerr << "FAIL " << e.kernel.name << " " << l.c->spec.attr() << "\n";
      for (const std::string &f : failures)
        std::cerr << "  " << f << "\n";
    }
    cu.cuModuleUnload(module);
  }
  std::cout << "kvgen-prologue-gpu (" << manifest.chip << "): " << loaded.size()
            << " descriptions, " << runs << " kernels, " << failed
            << " failed\n";
  return failed == 0 && runs > 0 ? 0 : 1;
}
