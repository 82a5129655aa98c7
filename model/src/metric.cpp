#include <actortrain/model/metric.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

void require_state_size(const std::string& metric_name, const std::vector<double>& s, size_t n) {
  if (s.size() != n)
    throw std::invalid_argument(
      fmt::format("{}: cannot merge a state of {} numbers into one of {}", metric_name, s.size(), n));
}

// Index of the first largest entry of row r.
Eigen::Index argmax(const matrix& m, Eigen::Index r) {
  Eigen::Index best = 0;
  for (Eigen::Index c = 1; c < m.cols(); ++c)
    if (m(r, c) > m(r, best)) best = c;
  return best;
}

// ---- accuracy: state {correct, count} --------------------------------------------------
class accuracy_metric final : public metric {
 public:
  std::string name() const override { return "accuracy"; }

  void update(const matrix& pred, const matrix& labels) override {
    const Eigen::Index n = pred.rows();
    const Eigen::Index k = pred.cols();
    const bool ok = labels.rows() == n && k > 0 && (labels.cols() == 1 || (k > 1 && labels.cols() == k));
    if (!ok)
      throw std::invalid_argument(fmt::format("accuracy: labels {} do not fit predictions {}",
                                              shape_string(labels), shape_string(pred)));
    double correct = 0;
    for (Eigen::Index r = 0; r < n; ++r) {
      bool hit;
      if (k == 1)
        hit = (pred(r, 0) > 0.0f) == (labels(r, 0) > 0.5f);
      else if (labels.cols() == 1)
        hit = static_cast<float>(argmax(pred, r)) == labels(r, 0);
      else
        hit = argmax(pred, r) == argmax(labels, r);
      correct += hit ? 1.0 : 0.0;
    }
    correct_ += correct;
    count_ += static_cast<double>(n);
  }

  double result() const override { return count_ > 0 ? correct_ / count_ : 0.0; }
  void reset() override { correct_ = count_ = 0.0; }
  std::vector<double> state() const override { return {correct_, count_}; }
  void merge(const std::vector<double>& other) override {
    require_state_size(name(), other, 2);
    correct_ += other[0];
    count_ += other[1];
  }
  std::unique_ptr<metric> clone() const override { return std::make_unique<accuracy_metric>(); }

 private:
  double correct_ = 0.0;
  double count_ = 0.0;
};

// ---- mean loss: state {sum of per-example losses, count} -------------------------------
class mean_loss_metric final : public metric {
 public:
  mean_loss_metric(loss_ptr l, std::string name) : loss_(std::move(l)), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  void update(const matrix& pred, const matrix& labels) override {
    // compute() is the mean over rows; times the rows it is the batch's sum.
    const double n = static_cast<double>(pred.rows());
    sum_ += loss_->compute(pred, labels, nullptr) * n;
    count_ += n;
  }

  double result() const override { return count_ > 0 ? sum_ / count_ : 0.0; }
  void reset() override { sum_ = count_ = 0.0; }
  std::vector<double> state() const override { return {sum_, count_}; }
  void merge(const std::vector<double>& other) override {
    require_state_size(name_, other, 2);
    sum_ += other[0];
    count_ += other[1];
  }
  std::unique_ptr<metric> clone() const override {
    return std::make_unique<mean_loss_metric>(loss_, name_);
  }

 private:
  loss_ptr loss_;
  std::string name_;
  double sum_ = 0.0;
  double count_ = 0.0;
};

// ---- ROC AUC by histogram: state {positives per bucket (T), negatives per bucket (T)} ---
// Thresholds as Keras: t_0 = -eps, t_i = i / (T - 1), t_{T-1} = 1 + eps. A probability p
// goes to bucket b = ceil(p (T - 1)) - 1 clipped to [0, T - 1], so p > t_i exactly when
// b >= i: the true and false positives at t_i are the suffix sums from bucket i. A label
// > 0.5 is positive. The ROC curve through the T points is integrated by the trapezoid
// rule (Keras's summation_method="interpolation" for ROC).
class auc_metric final : public metric {
 public:
  explicit auc_metric(int num_thresholds)
      : t_(num_thresholds), hist_(2 * static_cast<size_t>(num_thresholds), 0.0) {}

  std::string name() const override { return "auc"; }

  void update(const matrix& pred, const matrix& labels) override {
    if (pred.cols() != 1 || labels.cols() != 1 || labels.rows() != pred.rows())
      throw std::invalid_argument(fmt::format(
        "auc: wants one column of logits and one of labels, got predictions {} and labels {}",
        shape_string(pred), shape_string(labels)));
    const double scale = static_cast<double>(t_ - 1);
    for (Eigen::Index r = 0; r < pred.rows(); ++r) {
      const double x = pred(r, 0);
      const double p = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
      const double bucket = std::ceil(p * scale) - 1.0;
      // Clipped as a double first: a NaN logit lands in bucket 0 instead of an undefined cast.
      const int b = bucket >= 0.0 ? static_cast<int>(std::min(bucket, scale)) : 0;
      const bool positive = labels(r, 0) > 0.5f;
      hist_[static_cast<size_t>(positive ? b : t_ + b)] += 1.0;
    }
  }

  double result() const override {
    const auto t = static_cast<size_t>(t_);
    double pos = 0.0;
    double neg = 0.0;
    for (size_t b = 0; b < t; ++b) {
      pos += hist_[b];
      neg += hist_[t + b];
    }
    if (pos <= 0.0 || neg <= 0.0) return 0.0;
    // Walk thresholds from the top (t_{T-1}: nothing above) down to t_0 (everything).
    double tp = 0.0;
    double fp = 0.0;
    double area = 0.0;
    for (size_t i = t; i-- > 0;) {
      const double tp_above = tp;
      const double fp_above = fp;
      tp += hist_[i];
      fp += hist_[t + i];
      area += (fp - fp_above) / neg * (tp + tp_above) / (2.0 * pos);
    }
    return area;
  }

  void reset() override { std::fill(hist_.begin(), hist_.end(), 0.0); }
  std::vector<double> state() const override { return hist_; }
  void merge(const std::vector<double>& other) override {
    require_state_size(name(), other, hist_.size());
    for (size_t i = 0; i < hist_.size(); ++i) hist_[i] += other[i];
  }
  std::unique_ptr<metric> clone() const override { return std::make_unique<auc_metric>(t_); }

 private:
  int t_;
  std::vector<double> hist_;
};

}  // namespace

metric_ptr accuracy() { return std::make_unique<accuracy_metric>(); }

metric_ptr mean_loss(loss_ptr l, std::string name) {
  if (!l) throw std::invalid_argument(fmt::format("mean_loss '{}': no loss given", name));
  return std::make_unique<mean_loss_metric>(std::move(l), std::move(name));
}

metric_ptr auc(int num_thresholds) {
  if (num_thresholds < 2)
    throw std::invalid_argument(fmt::format("auc: num_thresholds must be >= 2, got {}", num_thresholds));
  return std::make_unique<auc_metric>(num_thresholds);
}

}  // namespace actortrain::model
