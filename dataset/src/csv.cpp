// CSV files of numbers: one element per data line.

#include "file_bytes.hpp"
#include "node.hpp"

#include <actortrain/dataset/csv.hpp>
#include <actortrain/dataset/error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <string_view>

namespace actortrain::dataset {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// Splits one line into fields: separated by `delim`, optionally double-quoted ("" is a
/// quote inside quotes), surrounding whitespace dropped.
std::vector<std::string> split(std::string_view line, char delim, const std::string& path,
                               int64_t line_no) {
  std::vector<std::string> fields;
  size_t i = 0;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::string field;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        field += line[i++];
      }
      if (!closed)
        throw file_error(path, fmt::format("field {} has an unterminated quote", fields.size() + 1),
                         line_no);
      while (i < line.size() && line[i] != delim) {
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
          throw file_error(path,
                           fmt::format("field {}: text after a closing quote", fields.size() + 1),
                           line_no);
        ++i;
      }
    } else {
      const size_t end = std::min(line.find(delim, i), line.size());
      field = std::string(trim(line.substr(i, end - i)));
      i = end;
    }
    fields.push_back(std::move(field));
    if (i >= line.size()) break;
    ++i;  // the delimiter
  }
  return fields;
}

bool blank(std::string_view line) { return trim(line).empty(); }

struct column {
  size_t index;
  std::string name;  // for messages: "'age'" or "3"
};

}  // namespace

dataset from_csv(const std::string& path, const csv_options& options) {
  const auto bytes = detail::read_file_bytes(path);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());

  // Lines with their 1-based numbers, blank ones dropped.
  std::vector<std::pair<int64_t, std::string_view>> lines;
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++line_no;
    auto line = text.substr(pos, end - pos);
    if (!blank(line)) lines.emplace_back(line_no, line);
    pos = end + 1;
  }

  std::vector<std::string> header;
  size_t first_data = 0;
  size_t num_columns = 0;
  int64_t header_line = 0;
  if (options.header) {
    if (lines.empty()) throw file_error(path, "empty file: expected a header line");
    header_line = lines[0].first;
    header = split(lines[0].second, options.delimiter, path, header_line);
    num_columns = header.size();
    first_data = 1;
  } else if (!lines.empty()) {
    num_columns = split(lines[0].second, options.delimiter, path, lines[0].first).size();
  }

  auto column_list = [&] {
    std::string s;
    for (size_t i = 0; i < header.size(); ++i) s += (i ? ", " : "") + header[i];
    return s;
  };
  auto resolve = [&](const std::string& spec) -> column {
    if (options.header) {
      size_t found = header.size();
      for (size_t i = 0; i < header.size(); ++i) {
        if (header[i] != spec) continue;
        if (found != header.size())
          throw file_error(path, fmt::format("column '{}' appears more than once in the header",
                                             spec),
                           header_line);
        found = i;
      }
      if (found == header.size())
        throw file_error(path, fmt::format("no column '{}' in the header (columns: {})", spec,
                                           column_list()),
                         header_line);
      return {found, "'" + spec + "'"};
    }
    size_t index = 0;
    const auto t = trim(spec);
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), index);
    if (ec != std::errc() || p != t.data() + t.size() || t.empty())
      throw file_error(path, fmt::format("column '{}' is not a 0-based column index (the file "
                                         "has no header, so columns are selected by index)",
                                         spec));
    if (!lines.empty() && index >= num_columns)
      throw file_error(path, fmt::format("column {} is out of range: the file has {} columns",
                                         index, num_columns));
    return {index, std::to_string(index)};
  };

  std::vector<column> labels;
  for (const auto& spec : options.label_columns) labels.push_back(resolve(spec));
  std::vector<column> id_columns;
  for (const auto& spec : options.id_columns) id_columns.push_back(resolve(spec));
  std::vector<column> features;
  if (options.feature_columns.empty()) {
    for (size_t i = 0; i < num_columns; ++i) {
      bool is_label = false;
      for (const auto& l : labels) is_label = is_label || l.index == i;
      for (const auto& l : id_columns) is_label = is_label || l.index == i;
      if (!is_label)
        features.push_back({i, options.header ? "'" + header[i] + "'" : std::to_string(i)});
    }
  } else {
    for (const auto& spec : options.feature_columns) features.push_back(resolve(spec));
  }
  if (features.empty() && id_columns.empty() && num_columns > 0)
    throw std::invalid_argument(fmt::format("from_csv({}): no feature columns selected", path));

  const size_t rows = lines.size() - first_data;
  matrix x(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(features.size()));
  matrix y(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(labels.size()));
  auto parse = [&](const std::string& cell, const column& c, int64_t line) {
    std::string_view t = cell;
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    float v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (cell.empty())
      throw file_error(path, fmt::format("column {}: empty cell, expected a number", c.name), line);
    if (ec == std::errc::result_out_of_range)
      throw file_error(path, fmt::format("column {}: '{}' is out of range for float32", c.name,
                                         cell),
                       line);
    if (ec != std::errc() || p != t.data() + t.size())
      throw file_error(path, fmt::format("column {}: '{}' is not a number", c.name, cell), line);
    return v;
  };
  model::id_matrix ids(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(id_columns.size()));
  auto parse_id = [&](const std::string& cell, const column& c, int64_t line) -> int64_t {
    if (options.hash_ids) {
      uint64_t h = 0xcbf29ce484222325ull ^ (c.index * 0x9e3779b97f4a7c15ull);  // FNV-1a, seeded by the column
      for (unsigned char ch : cell) h = (h ^ ch) * 0x100000001b3ull;
      return static_cast<int64_t>(h >> 1);
    }
    std::string_view t = cell;
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (cell.empty()) throw file_error(path, fmt::format("column {}: empty cell, expected an integer id", c.name), line);
    if (ec == std::errc::result_out_of_range)
      throw file_error(path, fmt::format("column {}: '{}' is out of range for a 64-bit id", c.name, cell), line);
    if (ec != std::errc() || p != t.data() + t.size())
      throw file_error(path, fmt::format("column {}: '{}' is not an integer id", c.name, cell), line);
    return v;
  };
  for (size_t r = 0; r < rows; ++r) {
    const auto& [line, text_line] = lines[first_data + r];
    const auto fields = split(text_line, options.delimiter, path, line);
    if (fields.size() != num_columns)
      throw file_error(path, fmt::format("expected {} columns{}, found {}", num_columns,
                                         options.header ? " (as in the header)" : "",
                                         fields.size()),
                       line);
    const auto row = static_cast<Eigen::Index>(r);
    for (size_t j = 0; j < features.size(); ++j)
      x(row, static_cast<Eigen::Index>(j)) = parse(fields[features[j].index], features[j], line);
    for (size_t j = 0; j < labels.size(); ++j)
      y(row, static_cast<Eigen::Index>(j)) = parse(fields[labels[j].index], labels[j], line);
    for (size_t j = 0; j < id_columns.size(); ++j)
      ids(row, static_cast<Eigen::Index>(j)) = parse_id(fields[id_columns[j].index], id_columns[j], line);
  }
  element all;
  if (!features.empty()) all.features.push_back(std::move(x));
  if (!id_columns.empty()) {
    all.ids.resize(all.features.size() + 1);
    all.ids.back() = std::move(ids);
    all.features.emplace_back(static_cast<Eigen::Index>(rows), 0);
  }
  all.labels = std::move(y);
  auto label = "csv(" + detail::base_name(path) + ")";
  return dataset(detail::make_slices_node(std::move(all), std::move(label)));
}

}  // namespace actortrain::dataset
