#pragma once
// A step's rows of an embedding table: the distinct ids its batch holds, the batch's ids
// renumbered to rows of a compact table of those ids (model::compact_rows), and the
// compact table's gradient given the table's ids back. A worker so holds one row per
// distinct id of its batch, whatever the table's size, and the local trainer computes
// on a dynamic table (dynamic_table.hpp) the same way. tests/model/batch_rows_test.cpp.

#include <actortrain/model/batch_source.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <vector>

namespace actortrain::model {

/// The distinct ids, sorted, that inputs `feeds` of `b` hold: the values that are integers
/// in [0, vocab). Other values are skipped (the embedding layer reports them by row and
/// column), and so are inputs that `b` lacks.
std::vector<int64_t> batch_row_ids(const batch& b, const std::vector<int32_t>& feeds, int64_t vocab);

/// In inputs `feeds` of `b`, each value that is an element of `ids` (sorted, unique)
/// becomes its position there; other values stay as they are.
void renumber_rows(batch& b, const std::vector<int32_t>& feeds, const std::vector<int64_t>& ids);

/// A gradient of the compact table, whose ids are positions in `ids`, made the table's:
/// position p becomes ids[p] (the order is kept: `ids` is sorted). False, and `g` left as
/// it was, when a position is outside `ids`.
bool restore_row_ids(sparse_rows& g, const std::vector<int64_t>& ids);

}  // namespace actortrain::model
