// Admission control: the one place that decides whether a slice fits on this node.
//
// Invariants it keeps (over every slice that exists, whatever its state):
//  - on each GPU, the guaranteed slices' memory limits sum to at most the GPU's memory and
//    their compute shares to at most 1;
//  - a project's guaranteed memory (over all GPUs) stays within its memory quota and its
//    guaranteed compute shares within its compute quota (0 = unlimited);
//  - any slice's limit on a GPU is at most that GPU's memory.
// Opportunistic slices reserve nothing, so they are admitted over quota and over the GPU's
// guaranteed commitments; they are the work that yields.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model.h"

namespace gslice {

// What guaranteed slices have reserved on one GPU.
struct GpuCommitment {
  uint64_t guaranteed_memory = 0;
  double guaranteed_compute = 0;
  int slices = 0;  // every class
};

// Commitments by GPU UUID, over `slices`.
std::map<std::string, GpuCommitment> CommitmentsByGpu(const std::vector<Slice>& slices);

// Admits `candidate` (its GPUs given by UUID) given the node's GPUs, the slices that exist
// (the candidate excluded) and the candidate's project. The refusal names the GPU or the
// project, what is free and what was asked, and what to do.
Status Admit(const Slice& candidate, const std::vector<GpuInfo>& gpus,
             const std::vector<Slice>& existing, const Project& project);

// Guaranteed memory and compute a project holds over `slices`.
struct ProjectUsage {
  uint64_t guaranteed_memory = 0;
  double guaranteed_compute = 0;
  int slices = 0;
};
ProjectUsage UsageOfProject(const std::string& project, const std::vector<Slice>& slices);

// "8 GiB", "1.5 GiB": FormatSize into a std::string.
std::string SizeText(uint64_t bytes);
// "30%" for 0.3.
std::string PercentText(double fraction);

}  // namespace gslice
