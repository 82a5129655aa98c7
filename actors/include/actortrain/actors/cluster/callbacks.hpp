#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Keras-like callbacks on a cluster: the one interface of actortrain/model/callbacks.hpp
// (the trainer takes the same callbacks), given to every later fit (cluster::add_callback)
// or to one (fit_options::callbacks). The `training` a hook sees is the cluster
// (cluster_of gives the cluster itself). They run on the application's thread — the
// one in fit/join, where the event runner also drives the progress line and the metrics file — never inside an actor. A callback never holds
// training up: a slow one delays only the runner, and when the bounded event queue
// (cluster_spec::event_queue_capacity) fills, step events are dropped and counted
// (fit_result::dropped_events) while training goes on. The exception is one that asks
// for it: when a callback's waits_for_epoch_end() is true (early stopping, schedules,
// best-model checkpoints), epoch ends are synchronous, as in Keras and in TensorFlow's
// ParameterServerStrategy: the coordinator waits at each epoch's end (the epoch gate,
// cluster.hpp) until on_epoch_end and the next on_epoch_begin have run — at most the
// request timeout — so what they do (cluster::stop_training, keep_state,
// set_hyperparams, save_checkpoint) acts on exactly that epoch's end state.
//
// What the `training` calls do on a cluster: set_hyperparams asks every ps shard
// (asynchronously; at the gate, before the next epoch's first step), hyperparams() is
// what the cluster last set (the optimizer's own values to begin with),
// save_checkpoint is checkpoint_async, own_checkpoint_dir is cluster_spec::checkpoint_dir.
// on_train_batch_begin runs when the coordinator hands a step to a worker (the event
// stream carries step_begun events while a callback is given).
//
// Built in: early_stopping (monitor, patience, min_delta, restore best through the ps
// shards' kept state), learning-rate schedules (step, exponential, cosine; set with
// cluster::set_hyperparams at the gate, so every step of an epoch uses its rate; the
// rate is a function of the epoch, which checkpoints keep with the optimizer's
// hyperparameters, so a resumed run continues the schedule where it was),
// model_checkpoint (every N steps, or at the best monitored value), csv_logger (one
// row per epoch, as Keras's CSVLogger), reduce_lr_on_plateau (at the gate),
// terminate_on_nan (a cluster stops at the end of the epoch of the step whose loss was
// not finite) and lambda_callback.
//
// Includes no CAF.

#include <actortrain/model/callbacks.hpp>

namespace actortrain {

class cluster;

using model::callback;
using model::callback_ptr;
using model::cosine_decay;
using model::csv_logger;
using model::early_stopping;
using model::early_stopping_options;
using model::exponential_decay;
using model::failure_info;
using model::lambda_callback;
using model::lambda_hooks;
using model::learning_rate_schedule;
using model::model_checkpoint;
using model::model_checkpoint_options;
using model::reduce_lr_on_plateau;
using model::reduce_lr_options;
using model::step_decay;
using model::step_info;
using model::terminate_on_nan;
using model::training;

/// The cluster a hook's `training` is (for what only a cluster offers: status,
/// restart_worker, ...). Throws std::logic_error when it is a trainer's.
cluster& cluster_of(training& t);

}  // namespace actortrain
