# Hosts that are not loopback, for the tests (sourced after lib.sh): each task in a
# network namespace of its own, joined by a veth pair to a bridge that lives in a
# namespace of its own too, so the root namespace is never touched. Addresses are
# assigned here, inside namespaces created here, and everything is removed at exit.
#   netns_setup N        hosts 0..N-1: namespaces $NS_PREFIX-h<i>, each with eth0 at
#                        $NET.<i+1>/24 (HOST_IP[i]) and loopback up
#   on_host I CMD...     runs CMD inside host I (ip netns exec: /etc/netns/<ns>/hosts
#                        is that host's /etc/hosts)
#   host_names I LINE    appends LINE ("10.x.y.z name") to host I's /etc/hosts
#   veth_bytes I         bytes host I's eth0 sent and received (rx + tx)

netns_setup() {
  need_command ip iproute2
  local n=$1 i
  NS_PREFIX="at$$"
  NET="10.$((200 + RANDOM % 50)).$((RANDOM % 250))"
  NS_BRIDGE="$NS_PREFIX-br"
  HOST_NS=()
  HOST_IP=()
  AT_CLEANUP+=("netns_teardown")
  ip netns add "$NS_BRIDGE" || fail "cannot create a network namespace (root needed)"
  ip -n "$NS_BRIDGE" link add br0 type bridge || fail "cannot create a bridge"
  ip -n "$NS_BRIDGE" link set br0 up
  ip -n "$NS_BRIDGE" link set lo up
  for i in $(seq 0 $((n - 1))); do
    local ns="$NS_PREFIX-h$i"
    ip netns add "$ns" || fail "cannot create namespace $ns"
    HOST_NS+=("$ns")
    HOST_IP+=("$NET.$((i + 1))")
    # One end in the host as eth0, the other on the bridge.
    ip -n "$ns" link add eth0 type veth peer name "b$i" netns "$NS_BRIDGE" || fail "cannot create a veth pair"
    ip -n "$NS_BRIDGE" link set "b$i" master br0
    ip -n "$NS_BRIDGE" link set "b$i" up
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n' >"/etc/netns/$ns/hosts"
  done
}

netns_teardown() {
  local ns
  for ns in "${HOST_NS[@]}"; do
    # Processes left in a namespace keep it alive: end them first.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  ip netns del "$NS_BRIDGE" 2>/dev/null
}

on_host() {
  local i=$1
  shift
  ip netns exec "${HOST_NS[$i]}" "$@"
}

host_names() { printf '%s\n' "$2" >>"/etc/netns/${HOST_NS[$1]}/hosts"; }

veth_bytes() {
  local s=/sys/class/net/eth0/statistics
  on_host "$1" sh -c "echo \$(( \$(cat $s/rx_bytes) + \$(cat $s/tx_bytes) ))"
}
