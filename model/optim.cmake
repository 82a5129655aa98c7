# optimizers, partitioners, checkpoint files
list(APPEND MODEL_SOURCES
)
