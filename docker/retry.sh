#!/usr/bin/env bash
# Runs a network command, retried with backoff: a download that fails is tried again, never
# skipped, and the last failure is the command's exit status.
#
#   bash docker/retry.sh CMD [ARGS...]        run CMD
#   . docker/retry.sh; retry CMD [ARGS...]    the same as a function (CMD may be a shell function)
#
# Used by .ci/run and docker/local_base.sh on the host, and by the Dockerfile's network steps
# (bind-mounted there, so the image does not keep it).
#
# Behind a proxy that intercepts HTTPS, the CA that signs its certificates must be trusted. The
# image build gets it as a BuildKit secret (`docker build --secret id=ca,src=CA_BUNDLE`), mounted
# at /run/secrets/ca for the network steps only, never stored in a layer. When that file is there
# (or RETRY_CA_BUNDLE names another), pip, curl, Python's ssl and apt are told to trust it, for
# the retried command only.
#
# Environment: RETRY_ATTEMPTS (default 4), RETRY_DELAY (first pause in seconds, default 10;
# doubled after each failure).

# A subshell: the CA settings and the counters stay inside.
retry() (
  set +e -u -o pipefail
  [ "$#" -gt 0 ] || { echo "usage: retry CMD [ARGS...]" >&2; exit 2; }
  ca=${RETRY_CA_BUNDLE:-/run/secrets/ca}
  if [ -s "$ca" ]; then
    export PIP_CERT=$ca SSL_CERT_FILE=$ca REQUESTS_CA_BUNDLE=$ca CURL_CA_BUNDLE=$ca
    # apt reads the file APT_CONFIG names besides /etc/apt/apt.conf.d.
    apt_conf=$(mktemp)
    trap 'rm -f "$apt_conf"' EXIT
    printf 'Acquire::https::CAInfo "%s";\n' "$ca" >"$apt_conf"
    export APT_CONFIG=$apt_conf
  fi
  attempts=${RETRY_ATTEMPTS:-4}
  delay=${RETRY_DELAY:-10}
  n=1
  while :; do
    "$@"
    rc=$?
    [ "$rc" -eq 0 ] && exit 0
    if [ "$n" -ge "$attempts" ]; then
      echo "retry: '$*' failed $n times (last exit status $rc)" >&2
      exit "$rc"
    fi
    echo "retry: '$*' failed (exit status $rc), attempt $n of $attempts; again in ${delay}s" >&2
    sleep "$delay"
    n=$((n + 1))
    delay=$((delay * 2))
  done
)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  retry "$@"
  exit $?
fi
