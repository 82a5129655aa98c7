# optimizers, partitioners, checkpoint files
set(ACTORTRAIN_OPTIM_KERNELS
  src/optim/sgd.cpp
  src/optim/adam.cpp
  src/optim/adagrad.cpp
  src/optim/rmsprop.cpp
)
list(APPEND MODEL_SOURCES
  src/optim/optimizer.cpp
  ${ACTORTRAIN_OPTIM_KERNELS}
  src/optim/call_spec.cpp
  src/optim/make_optimizer.cpp
  src/optim/groups.cpp
  src/partitioner.cpp
  src/checkpoint/file_system.cpp
  src/checkpoint/fault_file_system.cpp
  src/checkpoint/memory_file_system.cpp
  src/checkpoint/npy.cpp
  src/checkpoint/checkpoint.cpp
)
# The update loops call sqrt on values that are never negative; without errno semantics
# GCC emits vsqrtps and vectorizes them (with errno it needs a scalar call path).
set_source_files_properties(${ACTORTRAIN_OPTIM_KERNELS} PROPERTIES COMPILE_OPTIONS -fno-math-errno)
