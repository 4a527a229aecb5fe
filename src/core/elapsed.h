// Wall time since a steady_clock reading, in seconds: the builds', searches', gates' and
// pipeline stages' own accounts of where their time went.
#pragma once

#include <chrono>

namespace gpulab {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gpulab
