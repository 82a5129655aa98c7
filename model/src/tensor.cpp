#include <actortrain/model/tensor.hpp>

#include <fmt/format.h>

namespace actortrain::model {

std::string to_string(const shape2& s) { return fmt::format("[{} x {}]", s.rows, s.cols); }

std::string shape_string(const matrix& m) { return fmt::format("[{} x {}]", m.rows(), m.cols()); }

}  // namespace actortrain::model
