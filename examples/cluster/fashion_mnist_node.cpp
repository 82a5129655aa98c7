// fashion_mnist_node — the same program on every task of a cluster of processes, as in
// TensorFlow: each process builds the same job (here the registered fashion_mnist,
// actortrain::jobs::fashion_mnist) and actortrain::run_node plays the task the command
// line (or TF_CONFIG) names. Start five terminals from the source tree:
//
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task ps:0
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task ps:1
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task worker:0
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task worker:1
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task chief:0
//
// (any order: each task waits up to timeouts.connect_ms for its peers). The chief prints
// the progress; every task prints the same history at the end. run_node takes --help,
// its own flags and CAF's (--caf.scheduler.max-threads=2).

#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>

int main(int argc, char** argv) {
  actortrain::jobs::fashion_mnist_options o;
  o.epochs = 5;
  auto j = actortrain::jobs::fashion_mnist(o);
  j.fit.verbose = 2;
  return actortrain::run_node(argc, argv, j);
}
