# tests of optimizers, partitioners, checkpoint files
