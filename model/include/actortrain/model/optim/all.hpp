#pragma once
// Every optimizer: the interface, the four Keras update rules, and the spec parser.

#include <actortrain/model/optim/adagrad.hpp>
#include <actortrain/model/optim/adam.hpp>
#include <actortrain/model/optim/groups.hpp>
#include <actortrain/model/optim/make_optimizer.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/optim/rmsprop.hpp>
#include <actortrain/model/optim/sgd.hpp>
