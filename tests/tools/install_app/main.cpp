// Trains a one-layer model on an embedded cluster using only installed headers and the
// installed library; exits 0 when the loss fell.
#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <cstdio>

int main() {
  namespace md = actortrain::model;
  caf::actor_system_config cfg;
  actortrain::configure(cfg);
  caf::actor_system sys{cfg};
  md::matrix x = md::matrix::Random(64, 3), y = x.rowwise().sum();
  actortrain::cluster c{sys, {}, md::model::sequential(3, {md::layers::dense(1)}), *md::make_sgd({0.1}),
                        md::mean_squared_error()};
  md::fit_options o;
  o.epochs = 20;
  o.verbose = 0;
  auto h = c.fit(actortrain::dataset::from_tensor_slices({x}, y).batch(16), o);
  std::printf("loss %g -> %g\n", h["loss"].front(), h["loss"].back());
  return h["loss"].back() < h["loss"].front() ? 0 : 1;
}
