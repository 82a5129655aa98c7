#pragma once
// The job this application trains, in one place: the program (simulated_faults.cpp)
// and its test (simulated_faults_test.cpp) both build it. It is the registered
// fashion_mnist job (actortrain::jobs::fashion_mnist: model, optimizer, loss, metrics,
// input pipelines) on a slice of the data: the first `images` training images, a
// quarter as many test images for validation, two epochs of batches of 64, on 2 ps
// shards and 2 workers. The same value runs as a cluster of processes (run_node) and is
// tested under simulated faults (simulate).

#include <actortrain/actors/jobs/jobs.hpp>

#include <string>

namespace example {

inline actortrain::job fashion_mnist_job(const std::string& data_dir, int64_t images) {
  actortrain::jobs::fashion_mnist_options o;
  o.epochs = 2;
  o.batch = 64;
  o.limit = images;
  o.data_dir = data_dir;
  auto j = actortrain::jobs::fashion_mnist(o);
  j.spec.num_ps = 2;
  j.spec.num_workers = 2;
  return j;
}

}  // namespace example
