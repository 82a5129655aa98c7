# tests of layers, losses, metrics
actortrain_test(model_layers_test SOURCES layers_test.cpp LABELS unit)
actortrain_test(model_loss_test SOURCES loss_test.cpp LABELS unit)
actortrain_test(model_metric_test SOURCES metric_test.cpp LABELS unit)
