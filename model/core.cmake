list(APPEND MODEL_SOURCES
  src/tensor.cpp
  src/variable.cpp
  src/initializer.cpp
)
