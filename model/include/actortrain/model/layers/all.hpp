#pragma once
// Every layer factory (namespace actortrain::model::layers), for users.

#include <actortrain/model/layers/activation.hpp>
#include <actortrain/model/layers/dense.hpp>
#include <actortrain/model/layers/dropout.hpp>
#include <actortrain/model/layers/embedding.hpp>
#include <actortrain/model/layers/gemm_tuning.hpp>
#include <actortrain/model/layers/merge.hpp>
