# tests of layers, losses, metrics
