#pragma once
// Everything a user of model/ needs: tensors, variables, layers, models, losses,
// metrics, initializers, optimizers, partitioners, checkpoint files, the local trainer.

#include <actortrain/model/batch_source.hpp>
#include <actortrain/model/callbacks.hpp>
#include <actortrain/model/checkpoint/all.hpp>
#include <actortrain/model/digest.hpp>
#include <actortrain/model/fpu.hpp>
#include <actortrain/model/initializer.hpp>
#include <actortrain/model/layers/all.hpp>
#include <actortrain/model/loss.hpp>
#include <actortrain/model/metric.hpp>
#include <actortrain/model/model.hpp>
#include <actortrain/model/optim/all.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/progress.hpp>
#include <actortrain/model/random.hpp>
#include <actortrain/model/tensor.hpp>
#include <actortrain/model/train_step.hpp>
#include <actortrain/model/trainer.hpp>
#include <actortrain/model/variable.hpp>
