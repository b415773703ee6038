#!/bin/sh
# CRIU action script (restore --empty-ns net): recreate the sandbox's veth in its
# restored, empty network namespace, as the worker's wk_net_sandbox_up does.
# HOST_IF, HOST_ADDR (e.g. 10.67.0.0), SBX_ADDR (e.g. 10.67.0.1) come from the
# sandbox's saved state.
[ "$CRTOOLS_SCRIPT_ACTION" = "setup-namespaces" ] || exit 0
P=$CRTOOLS_INIT_PID
ip link add "$HOST_IF" type veth peer name eth0 netns /proc/$P/ns/net || exit 1
ip addr add "$HOST_ADDR/31" dev "$HOST_IF" && ip link set "$HOST_IF" up || exit 1
nsenter --net=/proc/$P/ns/net sh -c "ip link set lo up; ip addr add $SBX_ADDR/31 dev eth0; ip link set eth0 up; ip route add default via $HOST_ADDR dev eth0" || exit 1
