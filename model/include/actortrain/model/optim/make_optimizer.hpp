#pragma once
// Building an optimizer from a command-line spec.

#include <actortrain/model/optim/optimizer.hpp>

#include <string>
#include <vector>

namespace actortrain::model {

/// Parses `spec` and returns a new optimizer. Grammar, with spaces allowed between tokens:
///
///   spec  := name [ "(" [ arg { "," arg } [","] ] ")" ]
///   arg   := [ key "=" ] value          positional args follow describe()'s order
///   value := number | true | false
///
/// e.g. "adam", "Adam", "adam(learning_rate=0.01)", "adam(0.01)",
/// "sgd(learning_rate=0.1, momentum=0.9, nesterov=1)", "rmsprop(centered=true)".
/// Names are case-insensitive (as Keras's `optimizers.get`); omitted hyperparameters get
/// the optimizer's documented defaults; `make_optimizer(o.describe())` rebuilds `o`.
/// Throws std::invalid_argument naming the bad token: an unknown optimizer (listing the
/// known ones), an unknown or repeated parameter, a value that is not a number, a value
/// out of range, or a syntax error with its position.
optimizer_ptr make_optimizer(const std::string& spec);

/// The names make_optimizer knows, sorted: {"adagrad", "adam", "rmsprop", "sgd"}.
std::vector<std::string> optimizer_names();

}  // namespace actortrain::model
