# layers, losses, metrics
list(APPEND MODEL_SOURCES
)
