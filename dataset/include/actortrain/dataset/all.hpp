#pragma once
// Everything of the input pipeline layer: #include <actortrain/dataset/all.hpp>.

#include <actortrain/dataset/csv.hpp>
#include <actortrain/dataset/dataset.hpp>
#include <actortrain/dataset/digest.hpp>
#include <actortrain/dataset/element.hpp>
#include <actortrain/dataset/error.hpp>
#include <actortrain/dataset/fashion_mnist.hpp>
#include <actortrain/dataset/idx.hpp>
#include <actortrain/dataset/input_context.hpp>
#include <actortrain/dataset/iterator.hpp>
#include <actortrain/dataset/sources.hpp>
