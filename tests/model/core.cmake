# tests of model/ core (variables, initializers, models, training)
