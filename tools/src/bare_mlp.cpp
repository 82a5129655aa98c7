#include "bare_mlp.hpp"

#include <actortrain/model/fpu.hpp>
#include <actortrain/model/random.hpp>

#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

namespace actortrain::tools {

using model::matrix;
using row = model::row_vector;

namespace {

struct adam_state {
  std::vector<float> m, v;
  explicit adam_state(size_t n) : m(n, 0.f), v(n, 0.f) {}
};

void adam_step(float* w, const float* g, size_t n, adam_state& s, float lr_t, float eps_hat) {
  const float b1 = 0.9f, b2 = 0.999f;
  float* m = s.m.data();
  float* v = s.v.data();
  for (size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps_hat);
  }
}

void glorot(matrix& w, uint64_t seed) {
  float limit = std::sqrt(6.0f / static_cast<float>(w.rows() + w.cols()));
  model::rng g{seed};
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = -limit + 2 * limit * g.uniform();
}

}  // namespace

bare_result train_bare_mlp(const matrix& x_train, const matrix& y_train, const matrix& x_test,
                           const matrix& y_test, int epochs, int64_t batch, float lr, uint64_t seed) {
  model::enable_flush_to_zero();
  const Eigen::Index n = x_train.rows(), d = x_train.cols();
  matrix w1(d, 256), w2(256, 128), w3(128, 10);
  glorot(w1, seed * 3 + 0);
  glorot(w2, seed * 3 + 1);
  glorot(w3, seed * 3 + 2);
  row b1 = row::Zero(256), b2 = row::Zero(128), b3 = row::Zero(10);
  matrix gw1(d, 256), gw2(256, 128), gw3(128, 10);
  row gb1(256), gb2(128), gb3(10);
  adam_state s[6] = {adam_state(static_cast<size_t>(w1.size())), adam_state(static_cast<size_t>(b1.size())),
                     adam_state(static_cast<size_t>(w2.size())), adam_state(static_cast<size_t>(b2.size())),
                     adam_state(static_cast<size_t>(w3.size())), adam_state(static_cast<size_t>(b3.size()))};
  matrix x, h1, h2, z, dz, dh2, dh1;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  int64_t t = 0;
  // The test accuracy, on buffers of its own (the training's keep their sizes).
  matrix eh1, eh2, ez;
  auto evaluate = [&] {
    int64_t correct = 0;
    for (Eigen::Index r0 = 0; r0 < x_test.rows(); r0 += 1000) {
      Eigen::Index bs = std::min<Eigen::Index>(1000, x_test.rows() - r0);
      eh1.noalias() = x_test.middleRows(r0, bs) * w1;
      eh1 = (eh1.rowwise() + b1).cwiseMax(0.f);
      eh2.noalias() = eh1 * w2;
      eh2 = (eh2.rowwise() + b2).cwiseMax(0.f);
      ez.noalias() = eh2 * w3;
      ez.rowwise() += b3;
      for (Eigen::Index r = 0; r < bs; ++r) {
        Eigen::Index arg;
        ez.row(r).maxCoeff(&arg);
        correct += arg == static_cast<Eigen::Index>(y_test(r0 + r, 0));
      }
    }
    return static_cast<double>(correct) / static_cast<double>(x_test.rows());
  };
  bare_result out;
  double trained = 0;  // seconds, evaluations left out
  for (int e = 0; e < epochs; ++e) {
    auto epoch_start = std::chrono::steady_clock::now();
    std::iota(perm.begin(), perm.end(), 0);
    model::rng g{seed, static_cast<uint64_t>(e) + 1};
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[g.below(i)]);
    for (Eigen::Index start_row = 0; start_row < n; start_row += batch) {
      Eigen::Index bs = std::min<Eigen::Index>(batch, n - start_row);
      x.resize(bs, d);
      for (Eigen::Index r = 0; r < bs; ++r) x.row(r) = x_train.row(perm[static_cast<size_t>(start_row + r)]);
      // forward
      h1.noalias() = x * w1;
      h1 = (h1.rowwise() + b1).cwiseMax(0.f);
      h2.noalias() = h1 * w2;
      h2 = (h2.rowwise() + b2).cwiseMax(0.f);
      z.noalias() = h2 * w3;
      z.rowwise() += b3;
      // softmax cross-entropy gradient of the batch mean
      dz.resize(bs, 10);
      for (Eigen::Index r = 0; r < bs; ++r) {
        float mx = z.row(r).maxCoeff();
        dz.row(r) = (z.row(r).array() - mx).exp();
        dz.row(r) /= dz.row(r).sum();
        dz(r, static_cast<Eigen::Index>(y_train(perm[static_cast<size_t>(start_row + r)], 0))) -= 1.f;
      }
      dz /= static_cast<float>(bs);
      // backward
      gw3.noalias() = h2.transpose() * dz;
      gb3 = dz.colwise().sum();
      dh2.noalias() = dz * w3.transpose();
      dh2 = (h2.array() > 0).select(dh2, 0.f);
      gw2.noalias() = h1.transpose() * dh2;
      gb2 = dh2.colwise().sum();
      dh1.noalias() = dh2 * w2.transpose();
      dh1 = (h1.array() > 0).select(dh1, 0.f);
      gw1.noalias() = x.transpose() * dh1;
      gb1 = dh1.colwise().sum();
      // Adam with Keras's defaults and bias correction
      ++t;
      float lr_t = lr * std::sqrt(1.f - std::pow(0.999f, static_cast<float>(t))) /
                   (1.f - std::pow(0.9f, static_cast<float>(t)));
      float eps = 1e-7f;
      adam_step(w1.data(), gw1.data(), static_cast<size_t>(w1.size()), s[0], lr_t, eps);
      adam_step(b1.data(), gb1.data(), static_cast<size_t>(b1.size()), s[1], lr_t, eps);
      adam_step(w2.data(), gw2.data(), static_cast<size_t>(w2.size()), s[2], lr_t, eps);
      adam_step(b2.data(), gb2.data(), static_cast<size_t>(b2.size()), s[3], lr_t, eps);
      adam_step(w3.data(), gw3.data(), static_cast<size_t>(w3.size()), s[4], lr_t, eps);
      adam_step(b3.data(), gb3.data(), static_cast<size_t>(b3.size()), s[5], lr_t, eps);
    }
    trained += std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    out.test_accuracy = evaluate();
    out.accuracy_at.emplace_back(trained, out.test_accuracy);
  }
  out.samples_per_second = static_cast<double>(n) * epochs / trained;
  return out;
}

}  // namespace actortrain::tools
