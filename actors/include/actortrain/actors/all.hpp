#pragma once
// The embedding API without CAF: configure() and the cluster. Applications that talk to
// the actors directly include the actor headers (which include CAF) themselves.

#include <actortrain/actors/cluster.hpp>
#include <actortrain/actors/configure.hpp>
#include <actortrain/actors/events.hpp>
