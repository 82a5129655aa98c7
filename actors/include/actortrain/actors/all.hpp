#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The embedding API without CAF: configure() and the cluster. Applications that talk to
// the actors directly include the actor headers (which include CAF) themselves.

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/distributed.hpp>
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/cluster/events.hpp>
