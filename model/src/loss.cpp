#include <actortrain/model/loss.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

void require_same_shape(const char* loss_name, const matrix& pred, const matrix& labels) {
  if (pred.rows() != labels.rows() || pred.cols() != labels.cols())
    throw std::invalid_argument(fmt::format("{}: labels {} do not fit predictions {}", loss_name,
                                            shape_string(labels), shape_string(pred)));
}

// ---- mean squared error ----------------------------------------------------------------
//   L = 1/(n k) sum_rc (p_rc - y_rc)^2,   dL/dp = 2 (p - y) / (n k)
class mse final : public loss {
 public:
  std::string describe() const override { return "mean_squared_error"; }

  double compute(const matrix& pred, const matrix& labels, matrix* d_pred) const override {
    require_same_shape("mean_squared_error", pred, labels);
    const Eigen::Index size = pred.size();
    if (d_pred) d_pred->resize(pred.rows(), pred.cols());
    if (size == 0) return 0.0;
    const float* p = pred.data();
    const float* y = labels.data();
    double sum = 0.0;
    if (d_pred) {
      const float g = 2.0f / static_cast<float>(size);
      float* d = d_pred->data();
      for (Eigen::Index i = 0; i < size; ++i) {
        const float e = p[i] - y[i];
        sum += static_cast<double>(e) * e;
        d[i] = g * e;
      }
    } else {
      for (Eigen::Index i = 0; i < size; ++i) {
        const double e = static_cast<double>(p[i]) - y[i];
        sum += e * e;
      }
    }
    return sum / static_cast<double>(size);
  }

  void per_example(const matrix& pred, const matrix& labels, matrix& out) const override {
    require_same_shape("mean_squared_error", pred, labels);
    out.resize(pred.rows(), 1);
    const double k = static_cast<double>(std::max<Eigen::Index>(1, pred.cols()));
    for (Eigen::Index r = 0; r < pred.rows(); ++r) {
      double s = 0.0;
      for (Eigen::Index c = 0; c < pred.cols(); ++c) {
        const double e = static_cast<double>(pred(r, c)) - labels(r, c);
        s += e * e;
      }
      out(r, 0) = static_cast<float>(s / k);
    }
  }
};

// ---- softmax cross-entropy from logits -------------------------------------------------
// Row r with logits z (k of them), m = max z, s = sum exp(z - m), lse = m + log s:
//   class id c:         L_r = lse - z_c,                     dL_r/dz = softmax(z) - e_c
//   probabilities y:    L_r = sum_j y_j (lse - z_j),         dL_r/dz = softmax(z) sum(y) - y
// The loss is the mean over rows, so the gradient is divided by n. With k == 1 a single
// label column is read as a probability (a class id could only be 0: same loss, 0).
class softmax_ce final : public loss {
 public:
  std::string describe() const override { return "softmax_cross_entropy"; }

  double compute(const matrix& pred, const matrix& labels, matrix* d_pred) const override {
    const bool ids = check(pred, labels);
    const Eigen::Index n = pred.rows();
    if (d_pred) d_pred->resize(n, pred.cols());
    if (n == 0) return 0.0;
    const float inv_n = 1.0f / static_cast<float>(n);
    double total = 0.0;
    for (Eigen::Index r = 0; r < n; ++r) {
      const auto z = pred.row(r).array();
      const float m = z.maxCoeff();
      float s;
      if (d_pred) {
        auto d = d_pred->row(r).array();
        d = (z - m).exp();
        s = d.sum();
      } else {
        s = (z - m).exp().sum();
      }
      const float lse = m + std::log(s);
      float label_sum = 1.0f;
      if (ids) {
        total += static_cast<double>(lse) - z(static_cast<Eigen::Index>(labels(r, 0)));
      } else {
        const auto y = labels.row(r).array();
        label_sum = y.sum();
        total += static_cast<double>(lse) * label_sum - static_cast<double>((y * z).sum());
      }
      if (d_pred) {
        auto d = d_pred->row(r).array();
        if (ids) {
          d *= inv_n / s;
          (*d_pred)(r, static_cast<Eigen::Index>(labels(r, 0))) -= inv_n;
        } else {
          d = d * (label_sum * inv_n / s) - labels.row(r).array() * inv_n;
        }
      }
    }
    return total / static_cast<double>(n);
  }

  void per_example(const matrix& pred, const matrix& labels, matrix& out) const override {
    const bool ids = check(pred, labels);
    out.resize(pred.rows(), 1);
    for (Eigen::Index r = 0; r < pred.rows(); ++r) {
      const auto z = pred.row(r).array();
      const float m = z.maxCoeff();
      const double lse = static_cast<double>(m) + std::log(static_cast<double>((z - m).exp().sum()));
      double l;
      if (ids) {
        l = lse - z(static_cast<Eigen::Index>(labels(r, 0)));
      } else {
        const auto y = labels.row(r).array();
        l = lse * static_cast<double>(y.sum()) - static_cast<double>((y * z).sum());
      }
      out(r, 0) = static_cast<float>(l);
    }
  }

 private:
  // Validates the labels; true when they are class ids (one column, k > 1).
  static bool check(const matrix& pred, const matrix& labels) {
    const Eigen::Index k = pred.cols();
    const bool ids = labels.cols() == 1 && k > 1;
    if (labels.rows() != pred.rows() || (!ids && labels.cols() != k) || k == 0)
      throw std::invalid_argument(fmt::format(
        "softmax_cross_entropy: labels {} do not fit logits {} (want one column of class ids or {} "
        "columns of probabilities)",
        shape_string(labels), shape_string(pred), k));
    if (ids)
      for (Eigen::Index r = 0; r < labels.rows(); ++r) {
        const double v = labels(r, 0);
        if (!(v >= 0.0 && v < static_cast<double>(k) && std::floor(v) == v))
          throw std::invalid_argument(fmt::format(
            "softmax_cross_entropy: label at row {} is {}; class ids must be integers in [0, {})", r,
            labels(r, 0), k));
      }
    return ids;
  }
};

// ---- binary cross-entropy from logits --------------------------------------------------
// For logit x and label z in [0, 1] (the stable form of -z log s(x) - (1-z) log(1 - s(x))):
//   l = max(x, 0) - x z + log(1 + exp(-|x|)),   dl/dx = sigmoid(x) - z
// averaged over all elements (Keras averages over the last axis, then over the batch).
class bce final : public loss {
 public:
  std::string describe() const override { return "binary_cross_entropy"; }

  double compute(const matrix& pred, const matrix& labels, matrix* d_pred) const override {
    check(pred, labels);
    const Eigen::Index size = pred.size();
    if (d_pred) d_pred->resize(pred.rows(), pred.cols());
    if (size == 0) return 0.0;
    const float g = 1.0f / static_cast<float>(size);
    const float* x = pred.data();
    const float* z = labels.data();
    float* d = d_pred ? d_pred->data() : nullptr;
    double total = 0.0;
    for (Eigen::Index i = 0; i < size; ++i) {
      const float e = std::exp(-std::abs(x[i]));
      total += static_cast<double>(std::max(x[i], 0.0f) - x[i] * z[i]) + std::log1p(static_cast<double>(e));
      if (d) {
        const float s = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        d[i] = g * (s - z[i]);
      }
    }
    return total / static_cast<double>(size);
  }

  void per_example(const matrix& pred, const matrix& labels, matrix& out) const override {
    check(pred, labels);
    out.resize(pred.rows(), 1);
    const double k = static_cast<double>(std::max<Eigen::Index>(1, pred.cols()));
    for (Eigen::Index r = 0; r < pred.rows(); ++r) {
      double s = 0.0;
      for (Eigen::Index c = 0; c < pred.cols(); ++c) {
        const double x = pred(r, c);
        s += std::max(x, 0.0) - x * labels(r, c) + std::log1p(std::exp(-std::abs(x)));
      }
      out(r, 0) = static_cast<float>(s / k);
    }
  }

 private:
  static void check(const matrix& pred, const matrix& labels) {
    require_same_shape("binary_cross_entropy", pred, labels);
    if ((labels.array() >= 0.0f && labels.array() <= 1.0f).all()) return;
    for (Eigen::Index r = 0; r < labels.rows(); ++r)
      for (Eigen::Index c = 0; c < labels.cols(); ++c)
        if (!(labels(r, c) >= 0.0f && labels(r, c) <= 1.0f))
          throw std::invalid_argument(fmt::format(
            "binary_cross_entropy: label at row {}, column {} is {}; labels must be in [0, 1]", r, c,
            labels(r, c)));
  }
};

// ---- class weights -------------------------------------------------------------------
//   L = 1/n sum_r w(class_r) l_r,   dL/dp_r = w(class_r) dl_r/dp_r / n
// The inner loss's mean and gradient are per row already (1/n each), so the weighted
// gradient is the inner gradient with row r scaled by w(class_r).
class weighted final : public loss {
 public:
  weighted(loss_ptr inner, std::map<int64_t, double> w) : inner_(std::move(inner)), w_(std::move(w)) {}

  std::string describe() const override {
    std::string s = "class_weighted(" + inner_->describe() + ", {";
    bool first = true;
    for (auto& [c, v] : w_) {
      s += fmt::format("{}{}: {}", first ? "" : ", ", c, v);
      first = false;
    }
    return s + "})";
  }

  double compute(const matrix& pred, const matrix& labels, matrix* d_pred) const override {
    inner_->compute(pred, labels, d_pred);  // checks the shapes, and the gradient of the plain mean
    matrix per;
    inner_->per_example(pred, labels, per);
    double sum = 0;
    for (Eigen::Index r = 0; r < pred.rows(); ++r) {
      const auto w = static_cast<float>(weight(labels, r));
      sum += static_cast<double>(w) * per(r, 0);
      if (d_pred) d_pred->row(r) *= w;
    }
    return pred.rows() > 0 ? sum / static_cast<double>(pred.rows()) : 0.0;
  }

  void per_example(const matrix& pred, const matrix& labels, matrix& out) const override {
    inner_->per_example(pred, labels, out);
    for (Eigen::Index r = 0; r < out.rows(); ++r) out(r, 0) *= static_cast<float>(weight(labels, r));
  }

 private:
  double weight(const matrix& labels, Eigen::Index r) const {
    int64_t cls = 0;
    if (labels.cols() == 1) {
      const float v = labels(r, 0);
      if (!(v >= 0) || v != std::floor(v))
        throw std::invalid_argument(fmt::format("class_weight: label {} at row {} is not a class id", v, r));
      cls = static_cast<int64_t>(v);
    } else {
      Eigen::Index at = 0;
      labels.row(r).maxCoeff(&at);
      cls = static_cast<int64_t>(at);
    }
    auto i = w_.find(cls);
    if (i == w_.end())
      throw std::invalid_argument(fmt::format("class_weight: no weight for class {} (row {} of the batch)", cls, r));
    return i->second;
  }

  loss_ptr inner_;
  std::map<int64_t, double> w_;
};

}  // namespace

loss_ptr class_weighted(loss_ptr inner, std::map<int64_t, double> weights) {
  if (!inner) throw std::invalid_argument("class_weighted: null loss");
  if (weights.empty()) throw std::invalid_argument("class_weighted: no weights");
  for (auto& [c, w] : weights)
    if (c < 0 || !(w >= 0) || !std::isfinite(w))
      throw std::invalid_argument(fmt::format("class_weighted: class {} weight {} (class ids >= 0, finite weights >= 0)", c, w));
  return std::make_shared<weighted>(std::move(inner), std::move(weights));
}

loss_ptr mean_squared_error() { return std::make_shared<mse>(); }
loss_ptr softmax_cross_entropy() { return std::make_shared<softmax_ce>(); }
loss_ptr binary_cross_entropy() { return std::make_shared<bce>(); }

}  // namespace actortrain::model
