#pragma once
// CSV files of numbers.

#include <actortrain/dataset/dataset.hpp>

#include <string>
#include <vector>

namespace actortrain::dataset {

/// How from_csv reads a file.
struct csv_options {
  /// Field separator. Fields may be double-quoted ("" inside quotes is a quote);
  /// whitespace around a field is ignored.
  char delimiter = ',';
  /// The first non-blank line names the columns.
  bool header = true;
  /// The columns of the (single) feature matrix, in this order: names when `header`,
  /// else 0-based indices written as decimal strings ("0", "3"). Empty: every column that
  /// is not a label column, in file order.
  std::vector<std::string> feature_columns;
  /// The columns of the label matrix, named like feature_columns. Empty: no labels.
  std::vector<std::string> label_columns;
  /// Columns read as 64-bit integer ids (decimal, optionally signed), named like
  /// feature_columns: one more input after the feature matrix (element::ids), for an
  /// embedding. They are never default feature columns.
  std::vector<std::string> id_columns;
  /// The id columns hold any text (categories such as "a9f3c0d1"): each cell's id is a
  /// 64-bit hash of its column and its text, made non-negative. Equal text in two
  /// columns gives two ids.
  bool hash_ids = false;
};

/// Reads a CSV file now: one element per non-blank data line, features as one 1 x k
/// matrix, the id columns (when any) as one more input of 1 x j int64 ids, labels as
/// 1 x m. Every selected cell must be a number (std::from_chars syntax,
/// also "nan" and "inf"). Throws file_error naming file, line and column, e.g.
/// "train.csv:17: column 'age': 'abc' is not a number" (or "is not an integer id"), for
/// unreadable files, unknown or out-of-range columns, ragged rows and non-numeric cells;
/// std::invalid_argument when neither a feature column nor an id column remains.
dataset from_csv(const std::string& path, const csv_options& options = {});

}  // namespace actortrain::dataset
