// Timing pieces of the benchmark: CUDA event pairs, the L2 flush, a steady clock, and the
// median / min / max summary of repetitions.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda/common/runtime.h"
#include "flashattn/forward.h"

struct CUevent_st;

namespace flashattn::bench {

// Times GPU work between start() and stop() on one stream with a pair of CUDA events.
class CudaEventTimer {
 public:
  CudaEventTimer() = default;
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  Status init();  // creates the events on the current device
  Status start(StreamHandle stream);
  Status stop(StreamHandle stream);
  // Waits for the stop event; milliseconds between the two events.
  Status elapsed_ms(double* ms) const;

 private:
  CUevent_st* start_ = nullptr;
  CUevent_st* stop_ = nullptr;
};

// Evicts the L2 cache by writing a buffer twice its size, so every timed run reads its inputs
// from HBM as it would in a model (H200: 2 x 60 MB).
class L2Flusher {
 public:
  Status init(int device);
  Status flush(StreamHandle stream) const;
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  cuda::DeviceBuffer buffer_;
};

// Milliseconds on a monotonic clock (CPU backends).
double steady_ms();

struct TimingSummary {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};
// Median (mean of the middle two for an even count), min and max; zeros when empty.
TimingSummary summarize(std::vector<double> ms);

}  // namespace flashattn::bench
