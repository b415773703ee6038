#!/bin/sh
# space-bootstrap: what the Kubernetes bootstrap Job and the join-token CronJob
# run (deploy/k8s/base/bootstrap.yaml, docs/kubernetes.md), in the tools image.
# It talks to the Kubernetes API with the pod's service account (curl) and to
# the SPACE API with spacectl. Every step is idempotent: a key Secret or the CA's
# ConfigMap that exists is kept, never regenerated or changed.
#
#   space-bootstrap keys DIR     make the Secrets space-admin-key, space-secrets-key and
#                                space-e2b-secret unless they exist; write the admin key to
#                                DIR/admin.key (for space-controlplane --bootstrap-only)
#   space-bootstrap publish DIR  make the ConfigMap space-cluster-ca of DIR/ca.pem and
#                                DIR/token-keys.pem (public) unless it exists (one holding
#                                another CA is an error), then do `tokens`
#                                (creating the join tokens' Secrets the first time)
#   space-bootstrap tokens       wait for the API, create a join token for workers (role
#                                worker) and one for data planes (role dataplane), any number
#                                of uses, valid $SPACE_JOIN_TOKEN_TTL (default 36h); write each
#                                to its own Secret, space-join-token-worker and
#                                space-join-token-dataplane (key token), and once a Secret holds
#                                its new token revoke the tokens of that role this script made
#                                before (known by their descriptions; an operator's are never
#                                touched). Run alone (the CronJob, whose account may not
#                                create), it needs both Secrets to exist: `publish` makes them
#
# Environment: SPACE_ENDPOINT (the API, e.g. http://space-controlplane:7070),
# SPACE_API_KEY or SPACE_API_KEY_FILE (tokens), SPACE_WAIT_S (how long to wait for
# the API, default 600).
set -eu

sa=/var/run/secrets/kubernetes.io/serviceaccount
kube=${KUBERNETES_API:-https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}}
ns=${POD_NAMESPACE:-$(cat "$sa/namespace" 2>/dev/null || echo default)}
labels='"labels":{"app.kubernetes.io/part-of":"space","app.kubernetes.io/managed-by":"space-bootstrap"}'

log() { echo "space-bootstrap: $*" >&2; }
die() { log "$*"; exit 1; }

# kapi METHOD PATH [BODY]: calls the Kubernetes API; the answer's body goes to
# $tmp/body and its status is printed (000 when there was no answer).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
kapi() {
        # The token through a file (0600 under $tmp), never on curl's command line (/proc/PID/cmdline).
        (umask 077 && printf 'Authorization: Bearer %s\n' "$(cat "$sa/token" 2>/dev/null)" >"$tmp/auth")
        if [ -n "${3:-}" ]; then
                printf '%s' "$3" >"$tmp/req"
                curl -sS --max-time 30 --cacert "$sa/ca.crt" -H @"$tmp/auth" -H 'Content-Type: application/json' \
                        -o "$tmp/body" -w '%{http_code}' -X "$1" --data-binary "@$tmp/req" "$kube$2" || :
        else
                curl -sS --max-time 30 --cacert "$sa/ca.crt" -H @"$tmp/auth" \
                        -o "$tmp/body" -w '%{http_code}' -X "$1" "$kube$2" || :
        fi
}

# json_value KEY FILE: the first string value of KEY in the JSON in FILE, compact or
# indented, as it is written (escapes kept); enough for PEM and base64, which hold no quote.
json_value() {
        re=$(printf '%s' "$1" | sed 's/\./\\./g')
        tr -d '\n' <"$2" | grep -o "\"$re\": *\"[^\"]*\"" | head -n 1 | sed 's/^[^:]*: *"\(.*\)"$/\1/'
}

# secret_keep NAME KEY MAKE: creates Secret NAME with KEY holding what the command MAKE
# prints (base64 of it); one that exists is kept (the API's 409), never read or changed, so
# the Role needs no get on it. The value made for a Secret that exists goes nowhere.
secret_keep() {
        name=$1 key=$2 make=$3
        value=$($make | base64 | tr -d '\n')
        json="{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"type\":\"Opaque\",\"metadata\":{\"name\":\"$name\",$labels},\"data\":{\"$key\":\"$value\"}}"
        code=$(kapi POST "/api/v1/namespaces/$ns/secrets" "$json")
        case "$code" in
        201) log "secret/$name created" ;;
        409) log "secret/$name exists: kept" ;;
        *) die "creating secret/$name: HTTP $code: $(cat "$tmp/body")" ;;
        esac
}

# configmap_keep NAME KEY DATA: creates ConfigMap NAME with DATA (a JSON object) unless
# it exists; one that exists is kept if its KEY holds what DATA's does, else it is an error
# (the trust anchor is never replaced by this script: the operator deletes the ConfigMap).
configmap_keep() {
        name=$1 key=$2 data=$3
        json="{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"$name\",$labels},\"data\":$data}"
        code=$(kapi POST "/api/v1/namespaces/$ns/configmaps" "$json")
        case "$code" in
        201) log "configmap/$name created"; return 0 ;;
        409) ;;
        *) die "creating configmap/$name: HTTP $code: $(cat "$tmp/body")" ;;
        esac
        code=$(kapi GET "/api/v1/namespaces/$ns/configmaps/$name")
        [ "$code" = 200 ] || die "reading configmap/$name: HTTP $code: $(cat "$tmp/body")"
        printf '%s' "$data" >"$tmp/want"
        have=$(json_value "$key" "$tmp/body")
        if [ -z "$have" ] || [ "$have" != "$(json_value "$key" "$tmp/want")" ]; then
                die "configmap/$name exists and its $key is not this cluster's (another database?): delete it to publish this one"
        fi
        log "configmap/$name exists with this $key: kept"
}

# secret_value NAME KEY: prints the decoded value of KEY in Secret NAME.
secret_value() {
        code=$(kapi GET "/api/v1/namespaces/$ns/secrets/$1")
        [ "$code" = 200 ] || die "reading secret/$1: HTTP $code"
        v=$(json_value "$2" "$tmp/body")
        [ -n "$v" ] || die "secret/$1 has no $2"
        echo "$v" | base64 -d
}

# The first admin key: spk_key_<20 characters of the id alphabet>_<secret>.
make_admin_key() {
        id=$(head -c 20 /dev/urandom | od -An -tu1 | awk '{ for (i = 1; i <= NF; i++) printf "%s", substr("0123456789abcdefghjkmnpqrstvwxyz", $i % 32 + 1, 1) }')
        secret=$(head -c 33 /dev/urandom | base64 | tr -d '\n+/=')
        printf 'spk_key_%s_%s' "$id" "$secret"
}
# The secrets key ring (docs/secrets.md): one key, k1.
make_keyring() { printf 'k1 %s\n' "$(head -c 32 /dev/urandom | base64 | tr -d '\n')"; }
# space-e2b's envd token key: 32 random bytes.
make_e2b_key() { head -c 32 /dev/urandom; }

wait_api() {
        : "${SPACE_ENDPOINT:?SPACE_ENDPOINT names the API}"
        limit=${SPACE_WAIT_S:-600}
        i=0
        until curl -fsS --max-time 5 -o /dev/null "$SPACE_ENDPOINT/readyz" 2>/dev/null; do
                i=$((i + 2))
                [ "$i" -lt "$limit" ] || die "the API at $SPACE_ENDPOINT was not ready within $limit s"
                sleep 2
        done
        log "the API at $SPACE_ENDPOINT is ready"
}

# The descriptions of the join tokens this script makes, per role: how it finds its own to
# revoke, and never an operator's. The second and third of each are those of earlier
# versions of this script (the second's tokens were in the one Secret space-join-tokens that
# held both roles' keys; this script neither reads nor writes that Secret).
desc_worker="space-bootstrap: workers, Secret space-join-token-worker"
desc_dataplane="space-bootstrap: data planes, Secret space-join-token-dataplane"
descs_worker="$desc_worker|space-bootstrap: workers, Secret space-join-tokens|kubernetes: workers"
descs_dataplane="$desc_dataplane|space-bootstrap: data planes, Secret space-join-tokens|kubernetes: data planes"

# ours_active DESCRIPTIONS: the ids of the active join tokens in `spacectl --json worker
# join-token ls` (on stdin, one field a line as spacectl writes it) whose description is one
# of DESCRIPTIONS (separated by |), one a line.
ours_active() {
        awk -v descs="$1" '
                BEGIN { n = split(descs, d, "|"); for (i = 1; i <= n; i++) ours[d[i]] = 1 }
                function value(s) { sub(/^[^:]*: *"/, "", s); sub(/", *$|"$/, "", s); return s }
                /^ *"id": *"/ { id = value($0) }
                /^ *"description": *"/ { desc = value($0) }
                /^ *"state": *"/ { state = value($0) }
                /^ *},? *$/ {
                        if (id != "" && state == "active" && (desc in ours)) print id
                        id = ""; desc = ""; state = ""
                }'
}

# new_token ROLE DESCRIPTION: creates a join token for ROLE; prints its id and the token.
new_token() {
        spacectl --quiet --json worker join-token create --role "$1" --uses 0 --ttl "$ttl" --description "$2" >"$tmp/token" ||
                return 1
        id=$(sed -n 's/^ *"id": *"\([^"]*\)".*/\1/p' "$tmp/token" | head -n 1)
        token=$(sed -n 's/^ *"token": *"\([^"]*\)".*/\1/p' "$tmp/token" | head -n 1)
        rm -f "$tmp/token"
        [ -n "$id" ] && [ -n "$token" ] || return 1
        printf '%s %s\n' "$id" "$token"
}

# revoke ID...: revokes each join token; one that fails is logged and the others are
# revoked all the same.
revoke() {
        for id in "$@"; do
                if spacectl --quiet worker join-token revoke "$id" >/dev/null; then
                        log "join token $id revoked"
                else
                        log "revoking join token $id failed: it stays valid until it expires"
                fi
        done
}

# secret_replace NAME VERSION DATA: makes Secret NAME hold DATA (a JSON object): replaces
# the Secret at resourceVersion VERSION, or creates it when VERSION is empty. Returns 1 when
# another writer came first (the API's 409): the Secret then holds that writer's data.
secret_replace() {
        name=$1 version=$2 data=$3
        meta="\"name\":\"$name\",$labels"
        [ -z "$version" ] || meta="$meta,\"resourceVersion\":\"$version\""
        json="{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"type\":\"Opaque\",\"metadata\":{$meta},\"data\":$data}"
        if [ -z "$version" ]; then
                code=$(kapi POST "/api/v1/namespaces/$ns/secrets" "$json")
        else
                code=$(kapi PUT "/api/v1/namespaces/$ns/secrets/$name" "$json")
        fi
        case "$code" in
        200 | 201) log "secret/$name written" ;;
        409) log "secret/$name was written by another run meanwhile: that run's token stays"; return 1 ;;
        404) die "secret/$name is gone (the bootstrap Job makes it: run it again)" ;;
        *) die "writing secret/$name: HTTP $code: $(cat "$tmp/body")" ;;
        esac
}

# secret_version NAME: prints the resourceVersion of Secret NAME, or nothing if it does not
# exist.
secret_version() {
        code=$(kapi GET "/api/v1/namespaces/$ns/secrets/$1")
        case "$code" in
        200) json_value resourceVersion "$tmp/body" ;;
        404) ;;
        *) die "reading secret/$1: HTTP $code: $(cat "$tmp/body")" ;;
        esac
}

# tokens [create]: a new join token per role, each in its own Secret, so that a pod (and the
# node it runs on, whose kubelet may read every key of a Secret its pods name) holds its own
# role's token only. With `create`, a Secret that does not exist is made (the bootstrap Job);
# without, it is an error found before any token is made (the CronJob may not create).
tokens() {
        wait_api
        if [ -z "${SPACE_API_KEY:-}" ] && [ -n "${SPACE_API_KEY_FILE:-}" ]; then
                SPACE_API_KEY=$(cat "$SPACE_API_KEY_FILE")
                export SPACE_API_KEY
        fi
        [ -n "${SPACE_API_KEY:-}" ] || die "no admin key (SPACE_API_KEY or SPACE_API_KEY_FILE)"
        ttl=${SPACE_JOIN_TOKEN_TTL:-36h}
        # Each Secret's version now: its write below succeeds only if no other run (the Job
        # beside the CronJob) wrote it meanwhile, so neither Secret ever holds a revoked token.
        version_w=$(secret_version space-join-token-worker)
        version_d=$(secret_version space-join-token-dataplane)
        if [ "${1:-}" != create ]; then
                [ -n "$version_w" ] || die "secret/space-join-token-worker does not exist (the bootstrap Job makes it: run it again)"
                [ -n "$version_d" ] || die "secret/space-join-token-dataplane does not exist (the bootstrap Job makes it: run it again)"
        fi
        # Listed before the new ones exist: this script's earlier tokens of each role, revoked
        # once that role's Secret holds its new token.
        old_w="" old_d=""
        if spacectl --quiet --json worker join-token ls >"$tmp/tokens"; then
                old_w=$(ours_active "$descs_worker" <"$tmp/tokens")
                old_d=$(ours_active "$descs_dataplane" <"$tmp/tokens")
        else
                log "listing join tokens failed: the earlier ones stay valid until they expire"
        fi
        w=$(new_token worker "$desc_worker") || die "creating the workers' join token"
        d=$(new_token dataplane "$desc_dataplane") || die "creating the data planes' join token"
        w64=$(printf '%s' "${w#* }" | base64 | tr -d '\n')
        d64=$(printf '%s' "${d#* }" | base64 | tr -d '\n')
        # One Secret, then the other; each role's earlier tokens are revoked once its Secret
        # holds the new one, and a new token that lost its Secret to another run is revoked.
        # Tokens made but not written (this run failing before a write) are this script's and
        # active: the next run revokes them. A run that fails between the two writes leaves
        # the workers' Secret new (the workers' earlier tokens revoked) and the data planes'
        # as it was (its token valid, not revoked); the next run replaces both and revokes
        # every earlier token of either role, the unwritten one included.
        # shellcheck disable=SC2086 # one id a line
        if secret_replace space-join-token-worker "$version_w" "{\"token\":\"$w64\"}"; then
                revoke $old_w
        else
                revoke "${w%% *}"
        fi
        # shellcheck disable=SC2086 # one id a line
        if secret_replace space-join-token-dataplane "$version_d" "{\"token\":\"$d64\"}"; then
                revoke $old_d
        else
                revoke "${d%% *}"
        fi
}

# json_string FILE: the file's contents as a JSON string (PEM: no quotes or backslashes).
json_string() { printf '"%s"' "$(sed 's/$/\\n/' "$1" | tr -d '\n')"; }

case "${1:-}" in
keys)
        dir=${2:?usage: space-bootstrap keys DIR}
        secret_keep space-admin-key admin.key make_admin_key
        secret_keep space-secrets-key secrets.keys make_keyring
        secret_keep space-e2b-secret secret.key make_e2b_key
        umask 077
        secret_value space-admin-key admin.key >"$dir/admin.key"
        log "admin key written to $dir/admin.key"
        ;;
publish)
        dir=${2:?usage: space-bootstrap publish DIR}
        [ -s "$dir/ca.pem" ] || die "$dir/ca.pem is missing (space-controlplane --bootstrap-only --ca-out)"
        [ -s "$dir/token-keys.pem" ] || die "$dir/token-keys.pem is missing"
        configmap_keep space-cluster-ca ca.pem "{\"ca.pem\":$(json_string "$dir/ca.pem"),\"token-keys.pem\":$(json_string "$dir/token-keys.pem")}"
        [ -n "${SPACE_API_KEY_FILE:-}" ] || SPACE_API_KEY_FILE=$dir/admin.key
        export SPACE_API_KEY_FILE
        tokens create
        ;;
tokens) tokens ;;
*)
        sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
