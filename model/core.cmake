list(APPEND MODEL_SOURCES
  src/tensor.cpp
  src/variable.cpp
  src/initializer.cpp
  src/model.cpp
  src/progress.cpp
  src/trainer.cpp
  src/callbacks.cpp
  src/train_step.cpp
  src/digest.cpp
  src/dynamic_table.cpp
  src/batch_rows.cpp
)
