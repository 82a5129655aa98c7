// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/ps/protocol.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/variable.hpp>

#include <fmt/format.h>

namespace actortrain {

std::string to_string(push_status s) {
  switch (s) {
    case push_status::applied: return "applied";
    case push_status::duplicate: return "duplicate";
    case push_status::held: return "held";
  }
  return "unknown";
}

void store_partition(model::parameter_store& store, const model::placement& pl, partition_value& pv, bool share) {
  const auto& vp = pl.variable(pv.key.variable);
  if (share && vp.partitions.size() == 1) {
    store.adopt(pv.key.variable, std::move(pv.value.value));
    return;
  }
  if (!store.has(pv.key.variable))
    store.adopt(pv.key.variable, std::make_shared<model::matrix>(vp.shape.rows, vp.shape.cols));
  const auto& part = vp.partitions[static_cast<size_t>(pv.key.index)];
  store[pv.key.variable].middleRows(part.row_begin, part.rows()) = *pv.value.value;
}

}  // namespace actortrain
