# layers, losses, metrics
list(APPEND MODEL_SOURCES
  src/layers/activation.cpp
  src/layers/dense.cpp
  src/layers/dropout.cpp
  src/layers/embedding.cpp
  src/layers/gemm_tuning.cpp
  src/layers/merge.cpp
  src/loss.cpp
  src/metric.cpp
)
