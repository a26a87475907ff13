#!/bin/sh
# kube-proxy's entrypoint in rljob's kind image: use the iptables backend (legacy or nft) that
# the node already uses, as the official image's iptables-wrapper does, then run kube-proxy.
legacy=$( (iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c '^-')
nft=$( (iptables-nft-save; ip6tables-nft-save) 2>/dev/null | grep -c '^-')
if [ "${legacy:-0}" -ge "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
for tool in iptables ip6tables; do
  update-alternatives --set "$tool" "/usr/sbin/$tool-$mode" >/dev/null
done
exec /usr/local/bin/kube-proxy.bin "$@"
