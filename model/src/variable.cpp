#include <actortrain/model/random.hpp>
#include <actortrain/model/variable.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

uint64_t variable_seed(uint64_t seed, size_t i) { return draw(seed, i, 0x766172ULL); }

parameter_store::parameter_store(const std::vector<variable_spec>& specs, uint64_t seed) {
  values_.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    if (s.dynamic && s.shape.rows == 0 && s.shape.cols > 0) {
      values_.push_back(std::make_shared<matrix>(0, s.shape.cols));
      continue;
    }
    if (s.shape.rows <= 0 || s.shape.cols <= 0)
      throw std::invalid_argument(
        fmt::format("variable '{}': shape {} is empty", s.name, to_string(s.shape)));
    matrix m(s.shape.rows, s.shape.cols);
    if (!s.init.fill)
      throw std::invalid_argument(fmt::format("variable '{}': no initializer", s.name));
    s.init.fill(m, variable_seed(seed, i));
    values_.push_back(std::make_shared<matrix>(std::move(m)));
  }
}

gradient_store::gradient_store(const std::vector<variable_spec>& specs) {
  dense.resize(specs.size());
  sparse.resize(specs.size());
  is_sparse.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    is_sparse[i] = specs[i].sparse;
    if (specs[i].sparse)
      sparse[i].rows.resize(0, specs[i].shape.cols);
    else
      dense[i] = matrix::Zero(specs[i].shape.rows, specs[i].shape.cols);
  }
}

void gradient_store::zero() {
  for (size_t i = 0; i < dense.size(); ++i) {
    if (is_sparse[i]) {
      sparse[i].ids.clear();
      sparse[i].rows.resize(0, sparse[i].rows.cols());
    } else {
      dense[i].setZero();
    }
  }
}

void accumulate_rows(sparse_rows& out, const std::vector<int64_t>& ids, const matrix& grad) {
  if (static_cast<Eigen::Index>(ids.size()) != grad.rows())
    throw std::invalid_argument(
      fmt::format("accumulate_rows: {} ids for a gradient of {}", ids.size(), shape_string(grad)));
  if (out.rows.rows() > 0 && out.rows.cols() != grad.cols())
    throw std::invalid_argument(fmt::format("accumulate_rows: row width {} into rows of width {}",
                                            grad.cols(), out.rows.cols()));
  // Merge old rows and new rows by id: sort the union of ids, sum duplicates.
  std::vector<int64_t> all = out.ids;
  all.insert(all.end(), ids.begin(), ids.end());
  std::vector<size_t> order(all.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all[a] < all[b]; });
  std::vector<int64_t> uniq;
  uniq.reserve(all.size());
  for (size_t k : order)
    if (uniq.empty() || uniq.back() != all[k]) uniq.push_back(all[k]);
  matrix merged = matrix::Zero(static_cast<Eigen::Index>(uniq.size()), grad.cols());
  size_t u = 0;
  const size_t old_n = out.ids.size();
  for (size_t k : order) {
    while (uniq[u] != all[k]) ++u;
    if (k < old_n)
      merged.row(static_cast<Eigen::Index>(u)) += out.rows.row(static_cast<Eigen::Index>(k));
    else
      merged.row(static_cast<Eigen::Index>(u)) += grad.row(static_cast<Eigen::Index>(k - old_n));
  }
  out.ids = std::move(uniq);
  out.rows = std::move(merged);
}

}  // namespace actortrain::model
