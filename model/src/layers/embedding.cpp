#include <actortrain/model/layers/embedding.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace actortrain::model::layers {

std::string to_string(combiner c) {
  switch (c) {
    case combiner::concat: return "concat";
    case combiner::sum: return "sum";
    case combiner::mean: return "mean";
  }
  return "unknown";
}

namespace {

// node_state use: vars = {embeddings}; ids = [k | the m = n * k ids of the last forward,
// occurrence p = r * k + j at ids[1 + p] | m entries of sort scratch for backward].
class embedding_op final : public layer {
 public:
  embedding_op(int64_t vocab, int64_t dim, combiner c, initializer init, std::optional<dynamic_rows> dyn = {})
      : vocab_(vocab), dim_(dim), comb_(c), init_(std::move(init)), dynamic_(dyn) {}

  std::string kind() const override { return "embedding"; }
  std::string describe() const override {
    if (dynamic_)
      return fmt::format("dynamic_embedding({}, {}, init={}, admit_after={}, evict_after={})", dim_, to_string(comb_),
                         init_.name, dynamic_->admit_after, dynamic_->evict_after);
    return fmt::format("embedding({}, {}, {}, init={})", vocab_, dim_, to_string(comb_), init_.name);
  }
  bool inputs_differentiable() const override { return false; }

  int64_t build(variable_registry& reg, const std::vector<int64_t>& input_widths,
                node_state& st) override {
    if (input_widths.size() != 1 || input_widths[0] <= 0)
      throw std::invalid_argument(
        fmt::format("{}: expects exactly one input of ids of positive width, got widths [{}]", label(),
                    fmt::join(input_widths, ", ")));
    st.vars.assign(1, dynamic_ ? reg.declare_dynamic("embeddings", dim_, init_, dynamic_->admit_after,
                                                     dynamic_->evict_after)
                               : reg.declare("embeddings", shape2{vocab_, dim_}, init_, /*sparse=*/true));
    st.ids.assign(1, input_widths[0]);
    return comb_ == combiner::concat ? input_widths[0] * dim_ : dim_;
  }

  void forward(const forward_context& ctx, const std::vector<const matrix*>& inputs, matrix& out,
               node_state& st) const override {
    const int64_t k = st.ids[0];
    if (inputs.size() != 1 || inputs[0]->cols() != k)
      throw std::invalid_argument(fmt::format("{}: expects one input of {} ids per row, got {} inputs, the first {}",
                                              label(), k, inputs.size(),
                                              inputs.empty() ? "missing" : shape_string(*inputs[0])));
    const matrix& x = *inputs[0];
    const matrix& e = (*ctx.params)[st.vars[0]];
    const Eigen::Index n = x.rows();
    st.ids.resize(static_cast<size_t>(1 + n * k));
    int64_t* ids = st.ids.data() + 1;
    const double vocab = static_cast<double>(vocab_);
    for (Eigen::Index r = 0; r < n; ++r)
      for (Eigen::Index j = 0; j < k; ++j) {
        const double v = x(r, j);
        if (!(v >= 0.0 && v < vocab && std::floor(v) == v))
          throw std::invalid_argument(fmt::format(
            "{}: id at row {}, column {} is {}; ids must be integers in [0, {})", label(), r, j, x(r, j), vocab_));
        ids[r * k + j] = static_cast<int64_t>(v);
        if (ids[r * k + j] >= e.rows())  // a table given as some of its rows (a worker's)
          throw std::invalid_argument(fmt::format("{}: id at row {}, column {} is {}, past the {} rows it was given",
                                                  label(), r, j, x(r, j), e.rows()));
      }
    if (comb_ == combiner::concat) {
      out.resize(n, k * dim_);
      for (Eigen::Index r = 0; r < n; ++r)
        for (Eigen::Index j = 0; j < k; ++j) out.row(r).segment(j * dim_, dim_) = e.row(ids[r * k + j]);
      return;
    }
    out.resize(n, dim_);
    for (Eigen::Index r = 0; r < n; ++r) {
      auto o = out.row(r);
      o = e.row(ids[r * k]);
      for (Eigen::Index j = 1; j < k; ++j) o += e.row(ids[r * k + j]);
      if (comb_ == combiner::mean) o *= 1.0f / static_cast<float>(k);
    }
  }

  void backward(const backward_context& ctx, const std::vector<const matrix*>& inputs, const matrix&,
                const matrix& d_out, const std::vector<matrix*>&, node_state& st) const override {
    const int64_t k = st.ids[0];
    const int64_t m = inputs[0]->rows() * k;
    const int64_t* ids = st.ids.data() + 1;
    const float scale = comb_ == combiner::mean ? 1.0f / static_cast<float>(k) : 1.0f;
    // The gradient row of occurrence p, as a dim-wide segment of d_out's storage: row-major
    // [n x (k * dim)] is [(n * k) x dim] for concat; sum and mean reuse row p / k.
    const float* g = d_out.data();
    const bool concat = comb_ == combiner::concat;
    auto grad_row = [&](int64_t p) {
      return Eigen::Map<const row_vector>(g + (concat ? p : p / k) * dim_, dim_);
    };
    sparse_rows& target = ctx.grads->sparse[static_cast<size_t>(st.vars[0])];

    if (!target.ids.empty()) {
      // Second application of a shared table in this step: merge with what is there.
      std::vector<int64_t> occ(ids, ids + m);
      matrix rows(m, dim_);
      for (int64_t p = 0; p < m; ++p) rows.row(p) = grad_row(p) * scale;
      accumulate_rows(target, occ, rows);
      return;
    }

    // Fast path, the same result as accumulate_rows into an empty target: sort the
    // occurrences by (id, position) in place (stable by position, so repeats are summed in
    // the order accumulate_rows sums them) and sum each run into one row.
    st.ids.resize(static_cast<size_t>(1 + 2 * m));
    ids = st.ids.data() + 1;
    int64_t* order = st.ids.data() + 1 + m;
    for (int64_t p = 0; p < m; ++p) order[p] = p;
    std::sort(order, order + m, [ids](int64_t a, int64_t b) {
      return ids[a] < ids[b] || (ids[a] == ids[b] && a < b);
    });
    int64_t unique = 0;
    for (int64_t q = 0; q < m; ++q)
      if (q == 0 || ids[order[q]] != ids[order[q - 1]]) ++unique;
    target.ids.resize(static_cast<size_t>(unique));
    target.rows.setZero(unique, dim_);
    int64_t u = -1;
    for (int64_t q = 0; q < m; ++q) {
      const int64_t p = order[q];
      if (q == 0 || ids[p] != ids[order[q - 1]]) target.ids[static_cast<size_t>(++u)] = ids[p];
      target.rows.row(u) += grad_row(p) * scale;
    }
  }

 private:
  std::string label() const { return name().empty() ? kind() : name(); }

  int64_t vocab_;
  int64_t dim_;
  combiner comb_;
  initializer init_;
  std::optional<dynamic_rows> dynamic_;
};

}  // namespace

layer_ptr embedding(int64_t vocab_size, int64_t dim, combiner c, initializer init) {
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 24))
    throw std::invalid_argument(
      fmt::format("embedding: vocab_size must be in [1, 2^24] (ids are floats), got {}", vocab_size));
  if (dim <= 0) throw std::invalid_argument(fmt::format("embedding: dim must be positive, got {}", dim));
  if (!init.fill) throw std::invalid_argument("embedding: the initializer is empty");
  return std::make_shared<embedding_op>(vocab_size, dim, c, std::move(init));
}

layer_ptr dynamic_embedding(int64_t dim, combiner c, initializer init, dynamic_rows rows) {
  if (dim <= 0) throw std::invalid_argument(fmt::format("dynamic_embedding: dim must be positive, got {}", dim));
  if (!init.fill) throw std::invalid_argument("dynamic_embedding: the initializer is empty");
  if (init.name == "glorot_uniform" || init.name == "he_normal")
    throw std::invalid_argument(fmt::format(
      "dynamic_embedding: {} scales by the table's shape, which a table without rows does not have; give one "
      "that does not (uniform, normal, constant, zeros)",
      init.name));
  return std::make_shared<embedding_op>(max_float_id, dim, c, std::move(init), rows);
}

}  // namespace actortrain::model::layers
