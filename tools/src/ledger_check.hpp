#pragma once
// `actortrain ledger check`: exactly-once from what the ps shards applied (their ledgers)
// and the example's own data definition, never from what the coordinator reports.

namespace actortrain::tools {

/// `actortrain ledger check --example NAME ... LEDGER... [-- EXAMPLE FLAGS]`; returns the
/// exit code: 0 exactly once, 1 a violation (each printed), 2 bad flags or input.
int ledger_command(int argc, char** argv, int first);

}  // namespace actortrain::tools
