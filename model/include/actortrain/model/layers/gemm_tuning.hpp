#pragma once
// Eigen sizes its GEMM blocks from the L1/L2/L3 sizes it reads with cpuid. On the
// project's AVX-512 machines (AMD EPYC, 48 KiB L1d per core) the blocks it derives from
// 48 KiB make dense()'s forward product X W of the 784-256 layer (128 x 784 x 256) run at
// half speed (~680 us against ~350 us); planning for a 32 KiB L1 restores it and takes the
// 784-256-128-10 MLP step from ~1.42 ms to ~1.1 ms at batch 128. The other products of the
// MLP are unaffected.
//
// The setting is process-wide (Eigen keeps one, unsynchronized): call this once at start-up
// from the thread that sets up training, before compute threads run, as the trainer does
// with enable_flush_to_zero(). It changes speed only, never results.

namespace actortrain::model {

/// Caps the L1 size Eigen plans GEMM blocks for at 32 KiB (keeps its L2 and L3 sizes).
/// Idempotent.
void tune_gemm_blocking();

}  // namespace actortrain::model
