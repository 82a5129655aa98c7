#pragma once
// A partition's state as the coordinator sends it at start: what the actor tests' shards
// are initialized with (the whole variable in one partition, nothing applied yet).

#include <actortrain/actors/ps/protocol.hpp>

#include <string>
#include <utility>

namespace actortrain::testing {

inline partition_state start_state(partition_key key, std::string name, bool sparse, model::matrix value) {
  partition_state p;
  p.key = key;
  p.name = std::move(name);
  p.row_end = value.rows();
  p.sparse = sparse;
  p.value = tensor{std::move(value)};
  return p;
}

}  // namespace actortrain::testing
