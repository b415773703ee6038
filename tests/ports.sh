# shellcheck shell=bash
# Loopback ports for scripts that start daemons under test (tests/e2b/run, bench/run): the shell
# side of tests/harness/port.c, with the same rules and the same locks. Source it, then
#   sp_port_block N   sets sp_port to the first of N consecutive free ports
# The ports lie outside the kernel's ephemeral range (ip_local_port_range), so no outgoing
# connection can take one before the daemon binds it, and each is reserved with an exclusive
# flock on /tmp/space-test-ports/<port> for as long as this shell (or what inherits the lock's
# descriptor) runs, so concurrent tests and scripts never pick the same one.

sp_port_block() {
        local n=$1 elo=32768 ehi=60999 lo hi span base tries i p fd ok
        local -a fds
        read -r elo ehi </proc/sys/net/ipv4/ip_local_port_range || true
        if ((elo - 10000 >= 2000)); then
                lo=10000 hi=$((elo - 1))
        elif ((65535 - ehi >= 2000)); then
                lo=$((ehi + 1)) hi=65535
        else
                echo "the ephemeral port range ($elo-$ehi) leaves no room for test ports" >&2
                return 1
        fi
        mkdir -p /tmp/space-test-ports && chmod 1777 /tmp/space-test-ports 2>/dev/null || true
        span=$((hi - lo + 1))
        base=$((lo + (RANDOM * 32768 + RANDOM) % span))
        for ((tries = 0; tries < 500; tries++)); do
                base=$((base + n > hi ? lo : base + n))
                ok=1 fds=()
                for ((i = 0; i < n && ok; i++)); do
                        p=$((base + i))
                        { : >>"/tmp/space-test-ports/$p"; } 2>/dev/null || true
                        exec {fd}<"/tmp/space-test-ports/$p" || {
                                ok=0
                                break
                        }
                        fds+=("$fd")
                        flock -n "$fd" || ok=0
                        # Taken if any TCP socket has it as its local port (listening, connected, TIME_WAIT).
                        if ((ok)) && command -v ss >/dev/null; then
                                [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ] || ok=0
                        elif ((ok)) && (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
                                ok=0
                        fi
                done
                if ((ok)); then
                        sp_port=$base
                        return 0
                fi
                for fd in "${fds[@]}"; do
                        exec {fd}<&-
                done
        done
        echo "no block of $n free ports in $lo-$hi" >&2
        return 1
}
