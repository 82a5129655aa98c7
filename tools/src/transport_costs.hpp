#pragma once
// What moving bytes between two processes costs in CPU beyond what the scaling model's
// calibration holds, measured on this machine for `actortrain scale predict` (its
// --tcp, --tls and --netns; docs/scaling.md). The model is calibrated on processes on
// one host's loopback, where the data plane moves tensors through shared memory: one
// copy at each end. Between hosts every byte takes the kernel's TCP path instead, and
// between ActorTrain's hosts it is inside TLS.

namespace actortrain::tools {

/// CPU seconds per byte at each end (the sender's and the receiver's together, halved).
struct transport_costs {
  double tcp = 0;  ///< a TCP connection's, beyond one memcpy (0 when not measured)
  double tls = 0;  ///< TLS 1.3's on that connection, beyond the plain connection's (0 when not measured)
};

/// Streams 128 MiB from one thread to another over a TCP connection (and with `tls`
/// the same again inside a TLS 1.3 session, AES-256-GCM, as ActorTrain's hosts
/// negotiate, with read-ahead as its sessions read), nine passes each, alternated, and
/// charges the process's CPU (user and kernel: the kernel's TCP and the interfaces' work
/// run in the threads' context) per byte at each end; medians. On 127.0.0.1, or with
/// `across_namespaces` between two network namespaces on a bridge (root), as two of a
/// cluster's hosts in tests/cluster/netns.sh: two veth hops and a bridge on the way.
///
/// Both threads run on one core. On two idle cores the reader is woken for every few
/// segments, and TLS's CPU per byte across namespaces came out anywhere from 0.7 to
/// 1.7 ns from one run to the next (TCP's stayed at 0.26-0.29); on one core each read
/// finds whole records waiting, as it does in a cluster whose cores are all busy, and
/// the figures held within 10% (TLS 0.53-0.58, TCP 0.15-0.17 ns across namespaces). The
/// CPU a cluster of 2 ps and 2 workers burnt across namespaces beyond loopback, counted
/// in /proc/stat, was 0.8 ns per byte at each end: 0.67-0.74 measured this way, 1.0-2.0
/// on two cores (docs/scaling.md).
///
/// Throws std::runtime_error when a connection breaks or a namespace cannot be made.
transport_costs measure_transport_costs(bool tcp, bool tls, bool across_namespaces);

}  // namespace actortrain::tools
