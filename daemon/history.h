// A fixed window of samples (GPU and slice memory and compute over time) for the
// dashboard's charts, so a page opened now shows the last minutes, not an empty chart.
//
// REQUIRES: external synchronization.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace gslice {

struct GpuPoint {
  std::string uuid;
  uint64_t memory_used = 0;         // whole device (NVML)
  uint64_t slices_memory_used = 0;  // what slices' processes hold on it (ledger)
  double utilization = -1;          // 0..1, -1 unknown
};

struct SlicePoint {
  std::string name;
  uint64_t memory_used = 0;
  double compute_used = -1;  // 0..1 of a GPU, -1 unknown
};

struct HistorySample {
  int64_t time_ms = 0;  // unix milliseconds
  std::vector<GpuPoint> gpus;
  std::vector<SlicePoint> slices;
};

class History {
 public:
  explicit History(size_t capacity) : capacity_(capacity) {}
  void Add(HistorySample sample) {
    samples_.push_back(std::move(sample));
    while (samples_.size() > capacity_) samples_.pop_front();
  }
  // Samples newer than `since_ms`, oldest first.
  std::vector<HistorySample> Since(int64_t since_ms) const {
    std::vector<HistorySample> out;
    for (const HistorySample& s : samples_) {
      if (s.time_ms > since_ms) out.push_back(s);
    }
    return out;
  }
  const HistorySample* Latest() const { return samples_.empty() ? nullptr : &samples_.back(); }

 private:
  size_t capacity_;
  std::deque<HistorySample> samples_;
};

}  // namespace gslice
