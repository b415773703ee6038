#!/bin/sh
# space-bootstrap: what the Kubernetes bootstrap Job and the join-token CronJob
# run (deploy/k8s/base/bootstrap.yaml, docs/kubernetes.md), in the tools image.
# It talks to the Kubernetes API with the pod's service account (curl) and to
# the SPACE API with spacectl. Every step is idempotent: a Secret that exists
# is kept, never regenerated.
#
#   space-bootstrap keys DIR     make the Secrets space-admin-key, space-secrets-key and
#                                space-e2b-secret unless they exist; write the admin key to
#                                DIR/admin.key (for space-controlplane --bootstrap-only)
#   space-bootstrap publish DIR  put DIR/ca.pem and DIR/token-keys.pem (public) into the
#                                ConfigMap space-cluster-ca, then do `tokens`
#   space-bootstrap tokens       wait for the API, create a join token for workers and one
#                                for data planes (any number of uses, $SPACE_JOIN_TOKEN_TTL,
#                                default 30d) and replace the Secret space-join-tokens
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

# put KIND NAME JSON: creates the object, or replaces it when it exists.
put() {
        kind=$1 name=$2 json=$3
        code=$(kapi POST "/api/v1/namespaces/$ns/$kind" "$json")
        if [ "$code" = 409 ]; then
                code=$(kapi PUT "/api/v1/namespaces/$ns/$kind/$name" "$json")
        fi
        case "$code" in 200 | 201) log "$kind/$name written" ;; *) die "writing $kind/$name: HTTP $code: $(cat "$tmp/body")" ;; esac
}

# secret_keep NAME KEY MAKE: creates Secret NAME with KEY holding what the
# command MAKE prints (base64 of it) unless the Secret exists; prints nothing.
secret_keep() {
        name=$1 key=$2 make=$3
        code=$(kapi GET "/api/v1/namespaces/$ns/secrets/$name")
        case "$code" in
        200) log "secret/$name exists: kept"; return 0 ;;
        404) ;;
        *) die "reading secret/$name: HTTP $code: $(cat "$tmp/body")" ;;
        esac
        value=$($make | base64 | tr -d '\n')
        json="{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"type\":\"Opaque\",\"metadata\":{\"name\":\"$name\",$labels},\"data\":{\"$key\":\"$value\"}}"
        code=$(kapi POST "/api/v1/namespaces/$ns/secrets" "$json")
        case "$code" in
        201) log "secret/$name created" ;;
        409) log "secret/$name made by another run meanwhile: kept" ;;
        *) die "creating secret/$name: HTTP $code: $(cat "$tmp/body")" ;;
        esac
}

# secret_value NAME KEY: prints the decoded value of KEY in Secret NAME.
secret_value() {
        code=$(kapi GET "/api/v1/namespaces/$ns/secrets/$1")
        [ "$code" = 200 ] || die "reading secret/$1: HTTP $code"
        # Compact or indented JSON alike: the first "KEY": "BASE64" pair.
        re=$(printf '%s' "$2" | sed 's/\./\\./g')
        v=$(tr -d '\n' <"$tmp/body" | grep -o "\"$re\": *\"[A-Za-z0-9+/=]*\"" | head -n 1 | sed 's/.*: *"\(.*\)"$/\1/')
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

tokens() {
        wait_api
        if [ -z "${SPACE_API_KEY:-}" ] && [ -n "${SPACE_API_KEY_FILE:-}" ]; then
                SPACE_API_KEY=$(cat "$SPACE_API_KEY_FILE")
                export SPACE_API_KEY
        fi
        [ -n "${SPACE_API_KEY:-}" ] || die "no admin key (SPACE_API_KEY or SPACE_API_KEY_FILE)"
        ttl=${SPACE_JOIN_TOKEN_TTL:-30d}
        w=$(spacectl --quiet worker join-token create --uses 0 --ttl "$ttl" --description "kubernetes: workers") ||
                die "creating the workers' join token"
        d=$(spacectl --quiet worker join-token create --uses 0 --ttl "$ttl" --description "kubernetes: data planes") ||
                die "creating the data planes' join token"
        w64=$(printf '%s' "$w" | base64 | tr -d '\n')
        d64=$(printf '%s' "$d" | base64 | tr -d '\n')
        put secrets space-join-tokens "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"type\":\"Opaque\",\"metadata\":{\"name\":\"space-join-tokens\",$labels},\"data\":{\"worker\":\"$w64\",\"dataplane\":\"$d64\"}}"
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
        put configmaps space-cluster-ca "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"space-cluster-ca\",$labels},\"data\":{\"ca.pem\":$(json_string "$dir/ca.pem"),\"token-keys.pem\":$(json_string "$dir/token-keys.pem")}}"
        [ -n "${SPACE_API_KEY_FILE:-}" ] || SPACE_API_KEY_FILE=$dir/admin.key
        export SPACE_API_KEY_FILE
        tokens
        ;;
tokens) tokens ;;
*)
        sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
