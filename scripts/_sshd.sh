# Sourced by scripts/test and scripts/bench: the ssh:// tests and the ssh bench run a real
# OpenSSH server on 127.0.0.1 (docs/development.md#the-ssh-tests), so /usr/sbin/sshd must
# exist. Installed here (Debian's openssh-server) when missing: quiet, once, and without
# starting the system's ssh service (a policy-rc.d that refuses every start, for the
# install only). Nothing to do, and no time spent, when sshd is there.
if [[ ! -x /usr/sbin/sshd ]]; then
  if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "tether: the ssh:// tests need OpenSSH's server (/usr/sbin/sshd): install" \
         "openssh-server (e.g. sudo apt-get install openssh-server)" >&2
    exit 1
  fi
  echo "tether: installing openssh-server for the ssh:// tests (once)..." >&2
  sshd_log="$(mktemp /tmp/tether-sshd-install.XXXXXX)"
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && made_policy=1
  fi
  sshd_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      openssh-server >>"$sshd_log" 2>&1
  }
  ok=""
  if sshd_install || { apt-get update -q >>"$sshd_log" 2>&1 && sshd_install; }; then ok=1; fi
  [[ -n "$made_policy" ]] && rm -f "$policy"
  if [[ -z "$ok" || ! -x /usr/sbin/sshd ]]; then
    cat "$sshd_log" >&2
    echo "tether: installing openssh-server failed (apt-get's output is above)" >&2
    exit 1
  fi
  rm -f "$sshd_log"
fi
