#pragma once
// A step's rows of an embedding table: the distinct ids its batch holds, the batch's ids
// renumbered to rows of a compact table of those ids (model::compact_rows), and the
// compact table's gradient given the table's ids back. A worker so holds one row per
// distinct id of its batch, whatever the table's size, and the local trainer computes
// on a dynamic table (dynamic_table.hpp) the same way. Ids come as floats or as 64-bit
// integers (batch::ids). tests/model/batch_rows_test.cpp.

#include <actortrain/model/batch_source.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <vector>

namespace actortrain::model {

/// The distinct ids, sorted, that inputs `feeds` of `b` hold: the values below `vocab`
/// that are integers >= 0 (of an input given as ids, batch::ids, any such value; of a
/// float input, those below 2^24, where floats are exact). Other values are skipped (the
/// embedding layer reports them by row and column), and so are inputs that `b` lacks.
std::vector<int64_t> batch_row_ids(const batch& b, const std::vector<int32_t>& feeds, int64_t vocab);

/// In inputs `feeds` of `b`, each id that is an element of `ids` (sorted, unique) becomes
/// its position there. An input given as ids becomes a float input of those positions
/// (an id not in `ids` keeps its value, as a float); in a float input, other values stay
/// as they are.
void renumber_rows(batch& b, const std::vector<int32_t>& feeds, const std::vector<int64_t>& ids);

/// Makes every input of `b` given as ids (batch::ids) a float input of the same values,
/// for the layers that read floats; inputs k with keep[k] stay ids. Throws std::invalid_argument naming the input, row,
/// column and value when an id's magnitude is 2^24 or more (a float would alias it).
void ids_as_floats(batch& b, const std::vector<bool>& keep = {});

/// A gradient of the compact table, whose ids are positions in `ids`, made the table's:
/// position p becomes ids[p] (the order is kept: `ids` is sorted). False, and `g` left as
/// it was, when a position is outside `ids`.
bool restore_row_ids(sparse_rows& g, const std::vector<int64_t>& ids);

}  // namespace actortrain::model
