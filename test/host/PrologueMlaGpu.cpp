//===- PrologueMlaGpu.cpp - the MLA prologue's kernels on a CUDA device ---===//
//
// The GPU half of kvgen-prologue-mla-suite, for a machine with a CUDA driver
// and no MLIR: it links the MLA cases and reference, and PrologueCases'
// driver loader and launcher only. `kvgen-prologue-mla-suite
// --emit-gpu=DIR` (where kvgen is built) writes each description's PTX and
// DIR/prologue.manifest (each kernel's plan and the seed of its inputs);
// this reads DIR, draws each kernel's inputs from its seed exactly as the
// suite does, launches the kernel on device 0 with the plan's grid (buffers
// that overlap on the host, the in-place q_pe and k_pe, share one device
// copy), and compares every byte with the reference.
//
//   kvgen-prologue-mla-gpu DIR               every kernel of DIR's manifest;
//                                            exit 77 where there is no device
//   kvgen-prologue-mla-gpu --self-test DIR   no device: every kernel of DIR
//                                            would fail if it wrote nothing
//
// DIR is checked (the manifest, each description one of this build's cases,
// each PTX file there) before the device is opened.
//
//===----------------------------------------------------------------------===//

#include "PrologueMlaCases.h"

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
  const MlaCase *c;
  const Manifest::Description *entry;
  std::string ptx;
};

/// Reads and checks DIR; "" or why it cannot be run.
std::string load(const std::string &dir, const std::vector<MlaCase> &all,
                 Manifest &manifest, std::vector<Loaded> &loaded) {
  if (std::string why = readManifest(dir + "/" + kManifestName, manifest);
      !why.empty())
    return why;
  std::map<std::string, const MlaCase *> byName;
  for (const MlaCase &c : all)
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

} // namespace

int main(int argc, char **argv) {
  std::string dir;
  bool self = false, usage = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--self-test")
      self = true;
    else if (dir.empty() && !arg.empty() && arg[0] != '-')
      dir = arg;
    else
      usage = true;
  }
  if (dir.empty() || usage) {
    std::cerr << "usage: kvgen-prologue-mla-gpu [--self-test] DIR\n"
                 "  DIR: written by kvgen-prologue-mla-suite --emit-gpu=DIR\n";
    return 2;
  }
  std::vector<MlaCase> all = mlaCases();
  Manifest manifest;
  std::vector<Loaded> loaded;
  if (std::string why = load(dir, all, manifest, loaded); !why.empty()) {
    std::cerr << "kvgen-prologue-mla-gpu: " << why << "\n";
    return 1;
  }
  int kernels = 0;
  for (const Loaded &l : loaded)
    kernels += static_cast<int>(l.entry->kernels.size());

  if (self) {
    // A kernel that writes nothing (the poisoned buffers come back as they
    // went) fails on the cache: every case writes some entry.
    int wrong = 0;
    for (const Loaded &l : loaded)
      for (const Manifest::Entry &e : l.entry->kernels) {
        Launcher nothing = [](const Kernel &, int64_t,
                              std::vector<HostBuffer> &, std::vector<int32_t> &,
                              const std::vector<bool> &) {
          return std::string();
        };
        std::string all;
        for (const std::string &f : checkMla(*l.c, e.kernel, e.seed, nothing))
          all += f + "; ";
        if (all.find("key_cache:") == std::string::npos) {
          std::cerr << "self-test FAIL: " << e.kernel.name
                    << ": a kernel that writes nothing passes (" << all
                    << ")\n";
          ++wrong;
        }
      }
    std::cout << "kvgen-prologue-mla-gpu --self-test: " << loaded.size()
              << " descriptions, " << kernels << " kernels, " << wrong
              << " failed\n";
    return wrong == 0 ? 0 : 1;
  }

  CudaDriver cu;
  if (std::string why = cu.init(); !why.empty()) {
    std::cout << "SKIPPED: kvgen-prologue-mla-gpu: " << why << "\n";
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
          checkMla(*l.c, e.kernel, e.seed, gpuLauncher(cu, module));
      if (failures.empty())
        continue;
      ++failed;
      std::cerr << "FAIL " << e.kernel.name << " " << l.c->spec().attr()
                << "\n";
      for (const std::string &f : failures)
        std::cerr << "  " << f << "\n";
    }
    cu.cuModuleUnload(module);
  }
  std::cout << "kvgen-prologue-mla-gpu (" << manifest.chip
            << "): " << loaded.size() << " descriptions, " << runs
            << " kernels, " << failed << " failed\n";
  return failed == 0 && runs > 0 ? 0 : 1;
}
