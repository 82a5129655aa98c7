#pragma once
// Checkpoint files: the file-system seam (and its fault injector for tests), .npy arrays,
// and checkpoint directories with their manifest.

#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/checkpoint_error.hpp>
#include <actortrain/model/checkpoint/fault_file_system.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/checkpoint/npy.hpp>
