#!/bin/bash
# rljob's stand-in for kindnetd (which the Go module proxy does not serve), run on every kind
# node by rljob-cni.service. It watches the Nodes with the kubelet's own credentials and:
#   - writes this node's CNI config once its podCIDR is known: ptp + host-local over that range;
#   - routes every other node's podCIDR through that node's InternalIP;
#   - masquerades what this node's pods send outside the pod ranges.
# It enforces no NetworkPolicy. Reading every Node needs the ClusterRole that
# /kind/manifests/default-cni.yaml grants to the group system:nodes.
set -o nounset -o pipefail

KUBECONFIG=/etc/kubernetes/kubelet.conf
CONF=/etc/cni/net.d/10-rljob.conflist
CHAIN=RLJOB-CNI-MASQ
self=$(hostname)
declare -A cidr_of=() ip_of=()
own_cidr=""

log() { echo "rljob-cni: $*" >&2; }

write_cni_config() {
  mkdir -p /etc/cni/net.d
  cat >"$CONF.tmp" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "rljob-kind",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  mv "$CONF.tmp" "$CONF"
  log "CNI config written for $1"
}

sync_masquerade() {
  [[ -n "$own_cidr" ]] || return 0
  iptables -t nat -N "$CHAIN" 2>/dev/null || iptables -t nat -F "$CHAIN"
  local node
  for node in "${!cidr_of[@]}"; do
    iptables -t nat -A "$CHAIN" -d "${cidr_of[$node]}" -j RETURN
  done
  iptables -t nat -A "$CHAIN" -j MASQUERADE
  iptables -t nat -C POSTROUTING -s "$own_cidr" -j "$CHAIN" 2>/dev/null \
    || iptables -t nat -A POSTROUTING -s "$own_cidr" -j "$CHAIN"
}

# One node's line: "<name> <podCIDR> <InternalIP>"; returns 0 when something changed.
apply() {
  local name=$1 cidr=$2 ip=$3
  [[ -n "$cidr" && -n "$ip" ]] || return 1
  [[ "${cidr_of[$name]:-}" == "$cidr" && "${ip_of[$name]:-}" == "$ip" ]] && return 1
  cidr_of[$name]=$cidr
  ip_of[$name]=$ip
  if [[ "$name" == "$self" ]]; then
    own_cidr=$cidr
    write_cni_config "$cidr"
  else
    ip route replace "$cidr" via "$ip" && log "route $cidr via $ip ($name)"
  fi
  return 0
}

until [[ -s "$KUBECONFIG" ]]; do sleep 1; done
sysctl -qw net.ipv4.ip_forward=1
template='{.metadata.name}{" "}{.spec.podCIDR}{" "}{.status.addresses[?(@.type=="InternalIP")].address}{"\n"}'
while true; do
  # -w prints every Node, then one line per change; the API server ends a watch after a few
  # minutes and the loop starts another (which lists again).
  while read -r name cidr ip; do
    if apply "$name" "${cidr:-}" "${ip:-}"; then sync_masquerade; fi
  done < <(kubectl --kubeconfig "$KUBECONFIG" get nodes -w -o jsonpath="$template" 2>&1)
  sleep 2
done
