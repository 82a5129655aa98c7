#pragma once
// The atoms that lead ActorTrain's messages (CAF 0.17 style, at most 10 characters).
// Included by messages.hpp and by the handle headers (ps/handle.hpp, data/handle.hpp,
// worker/handle.hpp), which the message types need before messages.hpp is complete.

#include <caf/atom.hpp>

namespace actortrain {

using pull_atom = caf::atom_constant<caf::atom("pull")>;
using pull_rows_atom = caf::atom_constant<caf::atom("pull_rows")>;
using push_atom = caf::atom_constant<caf::atom("push")>;
using hyper_atom = caf::atom_constant<caf::atom("hyper")>;
using init_atom = caf::atom_constant<caf::atom("init")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using fence_atom = caf::atom_constant<caf::atom("fence")>;
using batch_atom = caf::atom_constant<caf::atom("batch")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
using predict_atom = caf::atom_constant<caf::atom("predict")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using fit_atom = caf::atom_constant<caf::atom("fit")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using read_atom = caf::atom_constant<caf::atom("read")>;
using outage_atom = caf::atom_constant<caf::atom("outage")>;
using source_atom = caf::atom_constant<caf::atom("source")>;
using slow_atom = caf::atom_constant<caf::atom("slow")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using replace_atom = caf::atom_constant<caf::atom("replace")>;
using ckpt_atom = caf::atom_constant<caf::atom("ckpt")>;
using recover_atom = caf::atom_constant<caf::atom("recover")>;
using round_atom = caf::atom_constant<caf::atom("round")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using ps_handle_atom = caf::atom_constant<caf::atom("ps_handle")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using gate_atom = caf::atom_constant<caf::atom("gate")>;
using keep_atom = caf::atom_constant<caf::atom("keep")>;
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using ledger_atom = caf::atom_constant<caf::atom("ledger")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;

}  // namespace actortrain
