#include <actortrain/model/layers/gemm_tuning.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cstddef>

namespace actortrain::model {

void tune_gemm_blocking() {
  constexpr std::ptrdiff_t l1_plan = 32 * 1024;
  Eigen::setCpuCacheSizes(std::min(Eigen::l1CacheSize(), l1_plan), Eigen::l2CacheSize(),
                          Eigen::l3CacheSize());
}

}  // namespace actortrain::model
