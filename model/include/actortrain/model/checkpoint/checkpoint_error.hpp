#pragma once
// The one exception type of checkpoint files: thrown by the .npy codec and the checkpoint
// reader/writer for anything wrong with files on disk (I/O failure, malformed or
// inconsistent content). Its message names the file and the problem, e.g.
//   "/ckpt/ckpt-000000000042/dense.kernel.part0.npy: dtype '<f8' is not supported
//    (expected '<f4')".
// Caller mistakes (bad arguments) are std::invalid_argument instead.

#include <stdexcept>
#include <string>

namespace actortrain::model {

class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace actortrain::model
