//===- Sweep.h - every size in every mode, and the launch path --*- C++ -*-===//

#ifndef KVGEN_BENCH_SWEEP_H
#define KVGEN_BENCH_SWEEP_H

#include "Report.h"
#include "Timing.h"

namespace kvbench {

/// The launch anchors: an empty kernel eagerly, enqueued and in a graph,
/// and the 21-parameter empty kernel through cuLaunchKernel.
json measureLaunchAnchors(EmptyKernel &empty, EmptyAbiKernel &emptyAbi,
                          DeviceState &state, const Repetitions &reps);

/// The launch path at 1 token, where the eager loop is host-bound: the same
/// C++ loop around the empty kernels, the reference and kvrt's append (each
/// if there is one), in interleaved rounds so drift between them shows.
/// Adds to `launch`.
void compareLaunchPaths(Launchable &empty, EmptyAbiKernel &emptyAbi,
                        Launchable *generated, Launchable *reference, int sets,
                        DeviceState &state, const Repetitions &reps,
                        json &launch);

/// Measures one Launchable at one size in every mode.
Row measure(Launchable &what, const std::string &impl, const SizeCase &c,
            DeviceState &state, const CacheGeometry &g,
            const Repetitions &reps);

/// Times every configuration of the reference cold, keeps the fastest and
/// measures it in every mode.
Row measureTunedReference(ReferenceAppend &reference, const SizeCase &c,
                          DeviceState &state, const CacheGeometry &g,
                          const Repetitions &reps);

} // namespace kvbench

#endif // KVGEN_BENCH_SWEEP_H
