# tests of model/ core (variables, initializers, models, training)
actortrain_test(model_graph_test SOURCES model_test.cpp LABELS unit)
actortrain_test(model_trainer_test SOURCES trainer_test.cpp LABELS unit)
actortrain_test(model_callbacks_test SOURCES callbacks_test.cpp LABELS unit)
