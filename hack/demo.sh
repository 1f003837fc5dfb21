#!/usr/bin/env bash
# The local site: a self-contained Kubernetes cluster on this machine (kwokctl with the
# control plane built by hack/control-plane.sh, three simulated nodes), with Nodewright
# installed by its Helm chart and the operator running against it as the chart's
# ServiceAccount. Everything it writes stays in .demo/.
# Node edge-1 is played by nodewright-site (test/site): its kubelet, KubeVirt, a LINSTOR CSI
# driver and the Job controller, on real files, so that a VM's volume can really be migrated;
# edge-2 and edge-3 are kwok's. A node agent runs for each of the three nodes, as a process on
# this machine, as the chart's agent ServiceAccount with a token bound to its Node, on a played
# Kairos host (nodewright-site kairos-node, test/site/kairosplay) that a second played image
# can upgrade (OSVersionPolicy), whose boots the BootRecoveryPolicy nodewright follows
# (config/demo/bootrecoverypolicy.yaml).
#
#   hack/demo.sh up             start it (idempotent: an existing site is reused)
#   hack/demo.sh upgrade        upgrade the release ($NODEWRIGHT_DEMO_CHART) and restart the operator
#   hack/demo.sh stop-operator  stop the operator (before a helm uninstall, say)
#   hack/demo.sh stop-agents    stop the three agents (before a helm uninstall, say)
#   hack/demo.sh stop-legacy-sim  stop the legacy DaemonSet simulator (before the handover to Managed)
#   hack/demo.sh fault ARGS...  a fault of the played storage network (nodewright-site fault)
#   hack/demo.sh down           stop every process it started and remove its state
#
# Environment: NODEWRIGHT_DEMO_DIR (state folder, default .demo), NODEWRIGHT_DEMO_NAME
# (cluster name), NODEWRIGHT_DEMO_PROBE_ADDR / NODEWRIGHT_DEMO_METRICS_ADDR (operator ports,
# 127.0.0.1:PORT), NODEWRIGHT_DEMO_WEBHOOK_PORT (the operator's admission webhooks on 127.0.0.1, 19443),
# NODEWRIGHT_DEMO_STEP_INTERVAL (pause between the simulated DaemonSet's transitions, 3s),
# NODEWRIGHT_DEMO_CHART (the chart to install: a folder or a packaged .tgz; charts/nodewright),
# NODEWRIGHT_DEMO_VALUES (a values file over config/demo/chart-values.yaml),
# NODEWRIGHT_DEMO_PATIENCE (the limit of each wait for the site to come up, 300 seconds),
# NODEWRIGHT_DEMO_GATE_ADDR / NODEWRIGHT_DEMO_GATE_PROBE_ADDR (the LINSTOR gate's, 127.0.0.1:18443 and
# 127.0.0.1:18082), NODEWRIGHT_DEMO_STORAGE (replicated: every volume on the three nodes; single-node: on edge-1
# alone, for a ReplicationUpgrade) and NODEWRIGHT_DEMO_NETWORK (off: no played storage network
# even as root).
#
# As root (network namespaces need it) the nodes' agents run on the played storage network
# (nodewright-site network, test/site/netsite): each node in a network namespace with a bond in
# the profile's mode, a switch, played DRBD, and LINSTOR's stand-in behind the LINSTOR gate.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"

k8s="$root/bin/k8s/$KUBE_VERSION"
# The end-to-end tests run their own site beside a developer's with these two overrides.
state=${NODEWRIGHT_DEMO_DIR:-$root/.demo}
cluster=${NODEWRIGHT_DEMO_NAME:-nodewright-demo}
kubeconfig="$state/kubeconfig"
kwokctl_config="$state/kwokctl.yaml"
# patience bounds every wait on observed state, in seconds: long enough for a busy two-core
# machine, and no cost when the state holds sooner.
patience=${NODEWRIGHT_DEMO_PATIENCE:-300}
operator_log="$state/operator.log"
operator_pid="$state/operator.pid"
operator_kubeconfig="$state/operator.kubeconfig"
# The chart the site installs, and the helm that installs it.
chart=${NODEWRIGHT_DEMO_CHART:-$root/charts/nodewright}
# More values for the chart, over the local site's (a file; the upgrade test sets it).
extra_values=${NODEWRIGHT_DEMO_VALUES:-}
helm="$root/bin/tools/helm-$HELM_VERSION"
agents_dir="$state/agents"
# The played Kairos images: the nodes are installed with the first, and an OSVersionPolicy can
# move them to the second (nodewright-site kairos-image prints their references).
kairos_registry="$state/kairos/registry"
kairos_versions=(v3.4.2 v3.5.0)
kairos_policy="$state/kairos/os-upgrade.yaml"
# Set by start_agents when the agents run on played Kairos hosts, whose boots the demo's
# BootRecoveryPolicy follows (config/demo/bootrecoverypolicy.yaml).
kairos_hosts=
boot_policy="$root/config/demo/bootrecoverypolicy.yaml"
demo_nodes=(edge-1 edge-2 edge-3)
sim_log="$state/legacy-sim.log"
net_dir="$state/net"
net_log="$state/net.log"
net_pid="$state/net.pid"
gate_log="$state/linstor-gate.log"
gate_pid="$state/linstor-gate.pid"
gate_addr=${NODEWRIGHT_DEMO_GATE_ADDR:-127.0.0.1:18443}
gate_probe_addr=${NODEWRIGHT_DEMO_GATE_PROBE_ADDR:-127.0.0.1:18082}
storage=${NODEWRIGHT_DEMO_STORAGE:-replicated}
# The demo's EdgeProfile: the sample's site, with the storage bond in active-backup and its
# switch also carrying 802.3ad, so that a flip can be tried.
demo_profile="$root/config/demo/edgeprofile.yaml"
sim_pid="$state/legacy-sim.pid"
site_log="$state/site.log"
site_pid="$state/site.pid"
step_interval=${NODEWRIGHT_DEMO_STEP_INTERVAL:-3s}
probe_addr=${NODEWRIGHT_DEMO_PROBE_ADDR:-127.0.0.1:18081}
metrics_addr=${NODEWRIGHT_DEMO_METRICS_ADDR:-127.0.0.1:18080}
webhook_port=${NODEWRIGHT_DEMO_WEBHOOK_PORT:-19443}
# The demo's EdgeProfile signing key is encrypted with this password.
export NODEWRIGHT_PROFILE_PASSWORD=demo

export KWOK_WORKDIR="$state/kwok"
export KWOK_KUBE_VERSION="$KUBE_VERSION"
kwokctl=("$k8s/kwokctl" --name "$cluster")
kubectl=("$k8s/kubectl" --kubeconfig "$kubeconfig")

say() { printf 'demo: %s\n' "$*"; }
fail() {
  printf 'demo: FAILED: %s\n' "$1" >&2
  [ -n "${2:-}" ] && printf 'demo: see the log: %s\n' "$2" >&2
  exit 1
}

# check_loopback VARIABLE ADDRESS: the site listens on loopback only, so an address given to
# the operator must be 127.0.0.1:PORT.
check_loopback() {
  local port=${2#127.0.0.1:}
  if [ "$port" = "$2" ] || ! [[ $port =~ ^[1-9][0-9]{0,4}$ ]] || [ "$port" -gt 65535 ]; then
    fail "$1=$2: must be 127.0.0.1:PORT (PORT 1-65535): the local site listens on loopback only"
  fi
}

# check_patience: NODEWRIGHT_DEMO_PATIENCE is a whole number of seconds, at least 1.
check_patience() {
  if ! [[ $patience =~ ^[1-9][0-9]{0,5}$ ]]; then
    fail "NODEWRIGHT_DEMO_PATIENCE=$patience: must be a whole number of seconds from 1 to 999999 (the limit of each wait for the site)"
  fi
}

# from_root PATH: PATH as \$PWD/... when it is inside the repository, for copy-paste.
from_root() { case "$1" in "$root"/*) echo "\$PWD/${1#"$root"/}" ;; *) echo "$1" ;; esac; }

component_log() { echo "$KWOK_WORKDIR/clusters/$cluster/logs/$1.log"; }

# alive PID: the process exists and has not exited (a zombie left unreaped has).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Names the first control-plane component whose process is not running, with its log.
check_components() {
  local c pidfile
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok-controller; do
    pidfile="$KWOK_WORKDIR/clusters/$cluster/pids/$c.pid"
    if [ ! -f "$pidfile" ] || ! alive "$(cat "$pidfile")"; then
      fail "$c is not running" "$(component_log "$c")"
    fi
  done
}

# http_ok URL-PATH [ADDRESS]: true when the operator's probe endpoint (or ADDRESS's) answers
# 200 (no curl needed).
http_ok() {
  local addr=${2:-$probe_addr}
  local host=${addr%:*} port=${addr##*:} status
  { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$addr" >&3
  read -r _ status _ <&3 || status=
  exec 3<&-
  [ "$status" = 200 ]
}

running() { [ -f "$1" ] && alive "$(cat "$1")"; }
operator_running() { running "$operator_pid"; }

# stop PIDFILE NAME: SIGTERM, then SIGKILL after 20s.
stop() {
  if running "$1"; then
    say "stopping the $2 (pid $(cat "$1"))"
    kill -TERM "$(cat "$1")" 2>/dev/null || true
    local i
    for i in $(seq 1 40); do running "$1" || break; sleep 0.5; done
    if running "$1"; then kill -KILL "$(cat "$1")" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}

# agent_namespace: the namespace of the chart's agent DaemonSet; empty when the release runs
# no agent (agent.enabled: false, or a chart from before the agent).
agent_namespace() {
  "${kubectl[@]}" get daemonset -A -l app.kubernetes.io/component=agent,app.kubernetes.io/instance=nodewright \
    -o jsonpath='{.items[0].metadata.namespace}' 2>/dev/null || true
}

# start_agents: runs the node agent for each of the three nodes on this machine, as the
# DaemonSet's pods would: with the DaemonSet's arguments, NODE_NAME and POD_NAMESPACE, and a
# token of the chart's ServiceAccount nodewright-agent bound to the node's Node object, so with
# exactly the chart's RBAC, and its admission policy sees the token's node (the
# authentication.kubernetes.io/node-name of a pod's token) and lets each agent write only its
# own node's objects. Each agent's host is a folder of its own: --host-root and --state-dir
# point there. It is the site's build of the agent (bin/agent-site) on an empty played bond
# (--network-backend site): a bond operation finds no bond (BondNotFound), and nothing ever
# touches this machine's own network links. DRBD operations run this machine's drbdadm, if any,
# and fail without the DRBD kernel module.
# Each node is a played Kairos host (docs/local-site.md#played-kairos-hosts), its root the
# agent's --host-root: the agent runs under nodewright-site kairos-node, which installs the host
# with the first played image once, gives the agent the host's /proc and folder, and plays the
# machine's reboot when the agent asks for one (the agent's process ends, the host boots, the
# agent starts again). The pid file holds kairos-node's pid: stopping it stops the agent.
start_agents() {
  local ns
  ns=$(agent_namespace)
  if [ -z "$ns" ]; then
    say "the release runs no agent DaemonSet (agent.enabled: false): no agents"
    return
  fi
  local args=() n dir token i server= server_name= netns host
  if running "$net_pid"; then
    # The nodes reach the API server through the storage network's forwarder.
    server=$("$k8s/kubectl" --kubeconfig "$net_dir/nodes.kubeconfig" config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
    server_name=$("$k8s/kubectl" --kubeconfig "$net_dir/nodes.kubeconfig" config view --raw --minify -o jsonpath='{.clusters[0].cluster.tls-server-name}')
  fi
  mapfile -t args < <("${kubectl[@]}" get daemonset -n "$ns" nodewright-agent \
    -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}' |
    grep -v -e '^--host-root=' -e '^--state-dir=' -e '^--host-proc=' -e '^--site-kairos-dir=')
  local kairos_images=() launch=()
  # The help is read whole before it is searched: grep -q stops at the first match, and under
  # pipefail the agent's write into the closed pipe would fail the test at random.
  local help
  help=$("$root/bin/agent-site" --help 2>&1 || true)
  if [[ $help == *-site-kairos-dir* ]]; then
    mapfile -t kairos_images < <("$root/bin/nodewright-site" kairos-image --registry "$kairos_registry" "${kairos_versions[@]}")
    [ ${#kairos_images[@]} = ${#kairos_versions[@]} ] || fail "nodewright-site kairos-image did not give the played Kairos images"
    write_kairos_policy "${kairos_images[1]}"
    kairos_hosts=1
  else
    say "this bin/agent-site plays no Kairos host (no --site-kairos-dir): the agents run on plain folders, and no OS upgrade can run"
  fi
  for n in "${demo_nodes[@]}"; do
    dir="$agents_dir/$n"
    if running "$dir/agent.pid"; then
      say "the agent of $n is already running (pid $(cat "$dir/agent.pid"))"
      continue
    fi
    mkdir -p "$dir/host/etc/systemd/network" "$dir/host/oem" "$dir/state" "$dir/bond"
    token=$("${kubectl[@]}" create token -n "$ns" nodewright-agent --bound-object-kind Node --bound-object-name "$n" --duration 48h)
    write_kubeconfig "$dir/kubeconfig" nodewright-agent "$token" ${server:+"$server" "$server_name"}
    # The log is appended to: a restart (hack/demo.sh upgrade) keeps what the previous run wrote.
    if [ -n "$server" ]; then
      # On the storage network: in the node's namespace, its bond, DRBD and root files there.
      netns=$(cat "$net_dir/$n/netns") host="$net_dir/$n"
      launch=("$root/bin/agent-site")
      [ ${#kairos_images[@]} = 0 ] || launch=("$root/bin/nodewright-site" kairos-node --host-root "$host/root" --dir "$dir/kairos" \
        --registry "$kairos_registry" --image "${kairos_images[0]}" --drbd-dir "$host/drbd" -- "${launch[@]}")
      NODE_NAME=$n POD_NAMESPACE=$ns nohup ip netns exec "$netns" "${launch[@]}" --kubeconfig "$dir/kubeconfig" "${args[@]}" \
        --host-root "$host/root" --state-dir "$dir/state" --network-backend site --site-bond-dir "$host/bond" \
        --site-drbd-dir "$host/drbd" >>"$dir/agent.log" 2>&1 &
    else
      launch=("$root/bin/agent-site")
      [ ${#kairos_images[@]} = 0 ] || launch=("$root/bin/nodewright-site" kairos-node --host-root "$dir/host" --dir "$dir/kairos" \
        --registry "$kairos_registry" --image "${kairos_images[0]}" -- "${launch[@]}")
      NODE_NAME=$n POD_NAMESPACE=$ns nohup "${launch[@]}" --kubeconfig "$dir/kubeconfig" "${args[@]}" \
        --host-root "$dir/host" --state-dir "$dir/state" --network-backend site --site-bond-dir "$dir/bond" \
        >>"$dir/agent.log" 2>&1 &
    fi
    echo $! >"$dir/agent.pid"
  done
  say "started the agents of ${demo_nodes[*]} as ServiceAccount $ns/nodewright-agent (logs: ${agents_dir#"$root"/}/<node>/agent.log)"
  for n in "${demo_nodes[@]}"; do
    for i in $(seq 1 $((patience * 2))); do
      running "$agents_dir/$n/agent.pid" || fail "the agent of $n exited" "$agents_dir/$n/agent.log"
      if [ -n "$("${kubectl[@]}" get lease -n "$ns" "$n" -o jsonpath='{.spec.renewTime}' 2>/dev/null)" ]; then break; fi
      [ "$i" = $((patience * 2)) ] && fail "the agent of $n has not renewed its Lease $ns/$n within ${patience}s" "$agents_dir/$n/agent.log"
      sleep 0.5
    done
  done
}

# write_kairos_policy IMAGE: the OSVersionPolicy that moves every node to IMAGE, for the user
# to apply (make demo prints how).
write_kairos_policy() {
  local name=to-${kairos_versions[1]//./-}
  cat >"$kairos_policy" <<POLICY
# Moves every node of the demo to the second played Kairos image, one node at a time, each
# proven booted and soaked 30 s (docs/osversion.md). The demo VM's volume is ReadWriteOnce, so
# it cannot live-migrate: the policy stops it while its node is upgraded and starts it again
# after. kubectl apply -f this file, once the cluster is Managed.
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: OSVersionPolicy
metadata:
  name: $name
spec:
  image: $1
  soak: 30s
  vmProtection: Stop
POLICY
}

# start_boot_policy: the BootRecoveryPolicy nodewright, once the agents of played Kairos hosts
# run: created from config/demo/bootrecoverypolicy.yaml if absent (one already there is left
# as it is, with what a user changed), then waited for until it records every node's boot.
start_boot_policy() {
  [ -n "$kairos_hosts" ] || return 0
  if ! "${kubectl[@]}" get crd bootrecoverypolicies.nodewright.spectrocloud.com >/dev/null 2>&1; then
    say "the release has no BootRecoveryPolicy (a chart from before it): the nodes' boots are not followed"
    return
  fi
  if "${kubectl[@]}" get bootrecoverypolicy nodewright >/dev/null 2>&1; then
    say "the BootRecoveryPolicy nodewright is already there: left as it is"
  else
    say "creating the BootRecoveryPolicy nodewright ($(from_root "$boot_policy")): each Kairos node's boot followed"
    "${kubectl[@]}" apply -f "$boot_policy" >/dev/null
  fi
  local i n recorded missing
  for i in $(seq 1 $((patience * 2))); do
    recorded=" $("${kubectl[@]}" get bootrecoverypolicy nodewright -o jsonpath='{.status.nodes[*].name}' 2>/dev/null) "
    missing=
    for n in "${demo_nodes[@]}"; do [[ $recorded == *" $n "* ]] || missing+=" $n"; done
    [ -z "$missing" ] && return
    sleep 0.5
  done
  fail "the BootRecoveryPolicy nodewright has not recorded the boot of$missing within ${patience}s" "$operator_log"
}

stop_agents() {
  local n
  for n in "${demo_nodes[@]}"; do stop "$agents_dir/$n/agent.pid" "agent of $n"; done
}

# network_wanted: true when the agents run on the played storage network: as root, with
# iproute2, unless NODEWRIGHT_DEMO_NETWORK=off. network_skipped says in one line why not.
network_wanted() {
  [ "${NODEWRIGHT_DEMO_NETWORK:-}" != off ] && [ "$(id -u)" = 0 ] && command -v ip >/dev/null
}
network_skipped() {
  if [ "${NODEWRIGHT_DEMO_NETWORK:-}" = off ]; then
    say "NODEWRIGHT_DEMO_NETWORK=off: no storage network, so no bonds, DRBD or LINSTOR: flips and replication upgrades cannot run here"
  elif [ "$(id -u)" != 0 ]; then
    say "not root: no storage network (network namespaces need root), so no bonds, DRBD or LINSTOR: flips and replication upgrades cannot run here"
  else
    say "no iproute2 (ip): no storage network, so no bonds, DRBD or LINSTOR: flips and replication upgrades cannot run here (make test installs it)"
  fi
}

# start_network: the played storage network of the three nodes, and LINSTOR's stand-in
# (nodewright-site network): it writes what it made into $net_dir, and "ready" once up.
start_network() {
  case "$storage" in replicated | single-node) ;; *) fail "NODEWRIGHT_DEMO_STORAGE=$storage: must be replicated or single-node" ;; esac
  if running "$net_pid"; then
    say "the storage network is already running (pid $(cat "$net_pid"))"
    return
  fi
  local mode also i
  mode=$(sed -n 's/^ *bondMode: *//p' "$demo_profile")
  also=$(sed -n 's/^ *allowedBondModes: *\[\(.*\)\]/\1/p' "$demo_profile" | tr -d '" ')
  say "starting the storage network: edge-1, edge-2, edge-3 in network namespaces, bonds in $mode, DRBD and LINSTOR played, volumes $storage (log: $net_log)"
  nohup "$root/bin/nodewright-site" network --kubeconfig "$kubeconfig" --dir "$net_dir" \
    --nodes "$(IFS=,; echo "${demo_nodes[*]}")" --mode "$mode" --also-carry "$also" --storage "$storage" >"$net_log" 2>&1 &
  echo $! >"$net_pid"
  for i in $(seq 1 $((patience * 2))); do
    running "$net_pid" || fail "the storage network exited" "$net_log"
    [ -f "$net_dir/ready" ] && return
    sleep 0.5
  done
  fail "the storage network is not up after ${patience}s" "$net_log"
}

# network_values: the chart's values for the storage network: the LINSTOR gate forwards to
# the stand-in, with its client certificate in the Secret piraeus-datastore/linstor-client-tls,
# as Piraeus keeps it.
network_values() {
  ns_apply piraeus-datastore
  "${kubectl[@]}" create secret generic -n piraeus-datastore linstor-client-tls --type kubernetes.io/tls \
    --from-file=tls.crt="$net_dir/linstor/tls.crt" --from-file=tls.key="$net_dir/linstor/tls.key" \
    --from-file=ca.crt="$net_dir/linstor/ca.crt" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
  printf 'linstor:\n  url: %s\n  clientSecret:\n    namespace: piraeus-datastore\n    name: linstor-client-tls\nagent:\n  storageBond: bond0\n' \
    "$(cat "$net_dir/linstor/url")" >"$state/network-values.yaml"
}

# start_gate: runs the LINSTOR gate on this machine, as its pod would: with the arguments of
# the chart's Deployment and a token of its ServiceAccount, serving on $gate_addr with a
# certificate for 127.0.0.1 that the storage network made (the chart's is for the Service's
# names, which do not resolve here).
start_gate() {
  if running "$gate_pid"; then
    say "the LINSTOR gate is already running (pid $(cat "$gate_pid"))"
    return
  fi
  local args=() i
  if ! "${kubectl[@]}" get deployment -n nodewright-system nodewright-linstor-gate >/dev/null 2>&1; then
    say "the release runs no LINSTOR gate (a chart from before it): replication upgrades cannot reach LINSTOR"
    return
  fi
  write_kubeconfig "$state/linstor-gate.kubeconfig" nodewright-linstor-gate \
    "$("${kubectl[@]}" create token -n nodewright-system nodewright-linstor-gate --duration 48h)"
  mapfile -t args < <("${kubectl[@]}" get deployment -n nodewright-system nodewright-linstor-gate \
    -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}' |
    grep -v -e '^--listen=' -e '^--health-probe-bind-address=' -e '^--tls-cert-file=' -e '^--tls-key-file=' -e '^--audit-dir=')
  say "starting the LINSTOR gate as ServiceAccount nodewright-system/nodewright-linstor-gate on $gate_addr (log: $gate_log)"
  nohup "$root/bin/nodewright-linstor-gate" --kubeconfig "$state/linstor-gate.kubeconfig" "${args[@]}" \
    --listen "$gate_addr" --health-probe-bind-address "$gate_probe_addr" \
    --tls-cert-file "$net_dir/gate-tls/tls.crt" --tls-key-file "$net_dir/gate-tls/tls.key" \
    --audit-dir "$state/linstor-gate-audit" >>"$gate_log" 2>&1 &
  echo $! >"$gate_pid"
  for i in $(seq 1 $((patience * 2))); do
    running "$gate_pid" || fail "the LINSTOR gate exited" "$gate_log"
    if http_ok /readyz "$gate_probe_addr"; then return; fi
    sleep 0.5
  done
  fail "the LINSTOR gate is not ready after ${patience}s (readyz on $gate_probe_addr)" "$gate_log"
}

# write_kubeconfig FILE USER TOKEN [SERVER TLS-SERVER-NAME]: a kubeconfig of the site's API
# server (or SERVER, verified for TLS-SERVER-NAME) with USER's bearer token.
write_kubeconfig() {
  local server ca
  server=${4:-$("${kubectl[@]}" config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')}
  ca=$("${kubectl[@]}" config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  (
    umask 077
    printf 'apiVersion: v1\nkind: Config\ncurrent-context: %s\n' "$2"
    printf 'clusters:\n- name: site\n  cluster:\n    server: %s\n    certificate-authority: %s\n' "$server" "$ca"
    [ -z "${5:-}" ] || printf '    tls-server-name: %s\n' "$5"
    printf 'users:\n- name: %s\n  user:\n    token: %s\n' "$2" "$3"
    printf 'contexts:\n- name: %s\n  context:\n    cluster: site\n    user: %s\n' "$2" "$2"
  ) >"$1"
  chmod 600 "$1"
}

# ns_apply NAME [LABEL=VALUE...]: the namespace exists, with these labels.
ns_apply() {
  local name=$1
  shift
  "${kubectl[@]}" create namespace "$name" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
  [ $# -eq 0 ] || "${kubectl[@]}" label namespace "$name" --overwrite "$@" >/dev/null
}

# install_chart install|upgrade: installs or upgrades the chart ($NODEWRIGHT_DEMO_CHART, a
# folder or packaged chart; charts/nodewright by default) with the local site's values. An
# upgrade first applies the chart's CRDs, which Helm itself never upgrades.
install_chart() {
  [ -x "$helm" ] || fail "helm is not built: run 'make demo', which builds it"
  if [ "$1" = upgrade ]; then
    say "applying the CRDs of $(from_root "$chart")"
    "$helm" show crds "$chart" | "${kubectl[@]}" apply --server-side --force-conflicts -f - >/dev/null
  fi
  local values=(-f "$root/config/demo/chart-values.yaml")
  [ ! -f "$state/network-values.yaml" ] || values+=(-f "$state/network-values.yaml")
  [ -z "$extra_values" ] || values+=(-f "$extra_values")
  say "helm $1: Nodewright from $(from_root "$chart") into namespace nodewright-system (values: config/demo/chart-values.yaml${extra_values:+ and $(from_root "$extra_values")})"
  "$helm" upgrade --install nodewright "$chart" --kubeconfig "$kubeconfig" -n nodewright-system "${values[@]}" \
    --set webhook.port="$webhook_port" --set webhook.service.port="$webhook_port" \
    --set-file 'profile.trustedKeys.demo\.pub'="$state/profile.pub" \
    --wait --timeout "${patience}s" >"$state/helm.log" 2>&1 || fail "helm $1 failed" "$state/helm.log"
}

# start_operator: runs the operator on this machine, as the pods kwok simulates would: with
# the arguments of the chart's Deployment and the token of its ServiceAccount, so with exactly
# the chart's RBAC. Only its addresses and the demo's audit trail are added.
start_operator() {
  if operator_running; then
    say "the operator is already running (pid $(cat "$operator_pid"))"
    return
  fi
  local args=() gate=() pod
  write_kubeconfig "$operator_kubeconfig" nodewright-operator \
    "$("${kubectl[@]}" create token -n nodewright-system nodewright-operator --duration 48h)"
  mapfile -t args < <("${kubectl[@]}" get deployment -n nodewright-system nodewright-operator \
    -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}' |
    grep -v -e '^--health-probe-bind-address=' -e '^--metrics-bind-address=' -e '^--linstor-gate-')
  if running "$gate_pid"; then
    # The LINSTOR gate on this machine; the operator's token for it is bound to the operator's
    # pod (kwok's), as the kubelet projects it, since the gate takes no other.
    pod=$("${kubectl[@]}" get pods -n nodewright-system -l app.kubernetes.io/component=operator -o jsonpath='{.items[0].metadata.name}')
    [ -n "$pod" ] || fail "the operator's Deployment has no pod to bind the LINSTOR gate's token to" "$state/helm.log"
    (umask 077; "${kubectl[@]}" create token -n nodewright-system nodewright-operator --audience nodewright-linstor-gate \
      --bound-object-kind Pod --bound-object-name "$pod" --duration 48h >"$state/linstor-gate-token")
    gate=(--linstor-gate-url "https://$gate_addr" --linstor-gate-ca-file "$net_dir/gate-tls/ca.crt"
      --linstor-gate-token-file "$state/linstor-gate-token")
  fi
  [ "${#args[@]}" -gt 0 ] || fail "the chart's Deployment has no operator arguments" "$state/helm.log"
  # The audit trail: in $state/audit, checkpoints signed with a key made for this site and
  # published in the ConfigMap nodewright-system/nodewright-audit-checkpoint.
  if [ ! -f "$state/audit-key.pem" ]; then
    "$root/bin/nodewright-audit" keygen --private-key "$state/audit-key.pem" --public-key "$state/audit-key.pub"
  fi
  # The log is appended to: a restart (hack/demo.sh upgrade) keeps what the previous run wrote.
  say "starting the operator as ServiceAccount nodewright-system/nodewright-operator (log: $operator_log, audit trail: $state/audit)"
  nohup "$root/bin/operator" --kubeconfig "$operator_kubeconfig" "${args[@]}" "${gate[@]}" \
    --audit-dir "$state/audit" --audit-key-file "$state/audit-key.pem" --audit-checkpoint-interval 5s \
    --audit-checkpoint-configmap nodewright-system/nodewright-audit-checkpoint \
    --health-probe-bind-address "$probe_addr" --metrics-bind-address "$metrics_addr" \
    --webhook-host 127.0.0.1 --webhook-cert-hosts 127.0.0.1 \
    >>"$operator_log" 2>&1 &
  echo $! >"$operator_pid"
  local i
  for i in $(seq 1 $((patience * 2))); do
    operator_running || fail "the operator exited" "$operator_log"
    if http_ok /readyz; then break; fi
    [ "$i" = $((patience * 2)) ] && fail "the operator is not ready after ${patience}s (readyz on $probe_addr)" "$operator_log"
    sleep 0.5
  done
}

up() {
  check_loopback NODEWRIGHT_DEMO_PROBE_ADDR "$probe_addr"
  check_loopback NODEWRIGHT_DEMO_METRICS_ADDR "$metrics_addr"
  check_loopback NODEWRIGHT_DEMO_GATE_ADDR "$gate_addr"
  check_loopback NODEWRIGHT_DEMO_GATE_PROBE_ADDR "$gate_probe_addr"
  check_patience
  # Any step that fails without its own message is named, with the API server's log.
  trap 'fail "this step failed: $BASH_COMMAND" "$(component_log kube-apiserver)"' ERR
  local b
  for b in operator legacy-sim nodewright-site nodewright-copy nodewright-audit nodewright-profile agent-site; do
    [ -x "$root/bin/$b" ] || fail "bin/$b is missing: run 'make demo', which builds it"
  done
  [ -x "$k8s/kwokctl" ] || fail "the control plane is not built: run 'make demo', which builds it"
  mkdir -p "$state"

  local clusters
  clusters=$("${kwokctl[@]}" get clusters 2>/dev/null || true)
  if grep -qx "$cluster" <<<"$clusters"; then
    grep -qE '^ *bindAddress: "?127\.0\.0\.1"?$' "$KWOK_WORKDIR/clusters/$cluster/kwok.yaml" ||
      fail "the running cluster $cluster listens beyond 127.0.0.1 (it was made before the site kept to loopback): run 'make demo-down', then 'make demo'"
    say "reusing the running cluster $cluster"
  else
    say "starting cluster $cluster (kube-apiserver, etcd, controller-manager, scheduler, kwok $KUBE_VERSION)"
    # Every component binds 127.0.0.1 (kwokctl's default is 0.0.0.0, and etcd here has
    # neither TLS nor authentication): its API server, secure and health ports, etcd's client
    # and peer URLs, kwok's server. kwokctl 0.7 takes the address from a configuration file only.
    printf 'apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\noptions:\n  bindAddress: 127.0.0.1\n' \
      >"$kwokctl_config"
    if ! "${kwokctl[@]}" create cluster --runtime binary --config "$kwokctl_config" \
        --kubeconfig "$kubeconfig" \
        --kube-apiserver-binary "$k8s/kube-apiserver" \
        --etcd-binary "$k8s/etcd" \
        --kube-controller-manager-binary "$k8s/kube-controller-manager" \
        --kube-scheduler-binary "$k8s/kube-scheduler" \
        --kwok-controller-binary "$k8s/kwok" \
        --extra-args "kube-controller-manager=controllers=*,-job-controller,-persistentvolume-binder-controller" \
        --extra-args "kwok-controller=manage-all-nodes=false" \
        --extra-args "kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" \
        --wait "${patience}s" >"$state/kwokctl.log" 2>&1; then
      cat "$state/kwokctl.log" >&2
      check_components
      fail "kwokctl could not create the cluster" "$state/kwokctl.log"
    fi
  fi
  check_components

  say "adding two simulated nodes (edge-1 is the site's)"
  local n
  for n in 2 3; do
    "${kubectl[@]}" apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: edge-$n
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: edge-$n
    kubernetes.io/os: linux
    node-role.kubernetes.io/control-plane: ""
    type: kwok
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
NODE
  done
  "${kubectl[@]}" wait --for=condition=Ready node edge-2 edge-3 --timeout="${patience}s" >/dev/null ||
    fail "the simulated nodes did not become Ready" "$(component_log kwok-controller)"

  say "installing the KubeVirt, CSI snapshot and ServiceMonitor CRDs"
  local thirdparty=(-f "$root/config/thirdparty/kubevirt" -f "$root/config/thirdparty/snapshot" -f "$root/config/thirdparty/monitoring")
  "${kubectl[@]}" apply --server-side "${thirdparty[@]}" >/dev/null
  "${kubectl[@]}" wait --for=condition=Established "${thirdparty[@]}" --timeout="${patience}s" >/dev/null

  if network_wanted; then
    start_network
  else
    network_skipped
  fi

  if running "$site_pid"; then
    say "the site is already running (pid $(cat "$site_pid"))"
  else
    # The site plays edge-1 (kubelet, KubeVirt, a LINSTOR CSI driver, the Job controller)
    # on files in $state/site; kube-controller-manager runs without the Job and volume
    # binding controllers, which the site plays instead.
    local i
    say "starting the site: edge-1, KubeVirt and CSI on files (log: $site_log)"
    nohup "$root/bin/nodewright-site" run --kubeconfig "$kubeconfig" --dir "$state/site" \
      --copy-binary "$root/bin/nodewright-copy" --node-name edge-1 --nodes "$(IFS=,; echo "${demo_nodes[*]}")" \
      --drivers linstor.csi.linbit.com \
      >"$site_log" 2>&1 &
    echo $! >"$site_pid"
  fi
  for i in $(seq 1 $((patience * 2))); do
    running "$site_pid" || fail "the site exited" "$site_log"
    if "${kubectl[@]}" get node edge-1 >/dev/null 2>&1; then break; fi
    [ "$i" = $((patience * 2)) ] && fail "the site did not register node edge-1 within ${patience}s" "$site_log"
    sleep 0.5
  done
  "${kubectl[@]}" wait --for=condition=Ready node edge-1 --timeout="${patience}s" >/dev/null ||
    fail "node edge-1 is not Ready" "$site_log"
  # The legacy DaemonSet's namespace exists before the chart, which puts its read-only Role
  # there; the operator's namespace admits only pods of the restricted Pod Security level.
  ns_apply node-init
  ns_apply nodewright-system pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/warn=restricted pod-security.kubernetes.io/audit=restricted
  # EdgeProfiles are trusted when signed with the demo's key (the chart's profile.trustedKeys).
  if [ ! -f "$state/profile.key" ]; then
    "$root/bin/nodewright-profile" keygen --output-key-prefix "$state/profile" >/dev/null
  fi
  running "$net_pid" && network_values
  install_chart install
  running "$net_pid" && start_gate
  start_operator
  start_agents
  start_boot_policy

  "${kubectl[@]}" apply -f "$root/config/demo/storage.yaml" >/dev/null
  # The VM is created once. Applied again, its manifest would undo what a migration did
  # (the volume's claim, a VM stopped for the copy), so a VM already there is left as it is.
  if "${kubectl[@]}" get -n demo vm/database >/dev/null 2>&1; then
    say "the demo VM is already there (namespace demo): left as it is"
  else
    say "creating the demo VM (namespace demo) with 256 MiB of data on a ReadWriteOnce volume"
    "${kubectl[@]}" apply -f "$root/config/demo/vm.yaml" >/dev/null
    # The site's KubeVirt makes the VMI a moment after the VM; kubectl wait for a field of an
    # object not there yet fails at once (NotFound), so first for the object itself.
    { "${kubectl[@]}" wait -n demo --for=create vmi/database --timeout="${patience}s" >/dev/null &&
      "${kubectl[@]}" wait -n demo --for=jsonpath='{.status.phase}'=Running vmi/database --timeout="${patience}s" >/dev/null; } ||
      fail "the demo VM did not start" "$site_log"
  fi
  if [ ! -f "$state/site/demo-filled" ]; then
    "${kubectl[@]}" wait -n demo --for=jsonpath='{.status.phase}'=Bound pvc/database-rootdisk --timeout="${patience}s" >/dev/null ||
      fail "the demo VM's volume was not provisioned" "$site_log"
    "$root/bin/nodewright-site" fill --kubeconfig "$kubeconfig" --dir "$state/site" --mib 256 demo database-rootdisk
    touch "$state/site/demo-filled"
  fi

  # The chart's values name this profile; the operator applies the NodewrightCluster once it
  # is there and verifies.
  say "signing the demo's EdgeProfile (config/demo/edgeprofile.yaml) with the demo's key and applying it"
  local profile=$demo_profile
  if ! "${kubectl[@]}" explain edgeprofile.spec.network.allowedBondModes >/dev/null 2>&1; then
    # A release from before allowedBondModes: its API server would refuse the field.
    say "the release's EdgeProfile has no allowedBondModes (a chart from before it): the profile is signed without it, and no flip to 802.3ad can be tried"
    profile="$state/edgeprofile-unsigned.yaml"
    grep -v '^ *allowedBondModes:' "$demo_profile" >"$profile"
  fi
  if ! "${kubectl[@]}" explain edgeprofile.spec.osImages >/dev/null 2>&1; then
    # A release from before osImages: its API server would refuse the field.
    say "the release's EdgeProfile has no osImages (a chart from before it): the profile is signed without it, and no OS upgrade can be tried"
    grep -v '^ *osImages:' "$profile" >"$state/edgeprofile-no-os-images.yaml"
    profile="$state/edgeprofile-no-os-images.yaml"
  fi
  "$root/bin/nodewright-profile" sign --key "$state/profile.key" "$profile" \
    >"$state/edgeprofile.yaml"
  "${kubectl[@]}" apply -f "$state/edgeprofile.yaml" >/dev/null
  local applied=
  for i in $(seq 1 $((patience * 2))); do
    if "${kubectl[@]}" get nodewrightcluster nodewright >/dev/null 2>&1; then applied=1; break; fi
    sleep 0.5
  done
  [ -n "$applied" ] || fail "the operator did not apply the NodewrightCluster from the chart's values (kubectl describe cm -n nodewright-system nodewright-cluster-spec)" "$operator_log"

  if running "$sim_pid"; then
    say "the legacy DaemonSet simulator is already running (pid $(cat "$sim_pid"))"
  else
    # The simulator plays the legacy DaemonSet the sample NodewrightCluster observes:
    # bootstrap, the single- to multi-node upgrade, a lost peer and its recovery, in a loop.
    say "starting the legacy DaemonSet simulator (log: $sim_log)"
    nohup "$root/bin/legacy-sim" run --scenario full --loop --step-interval "$step_interval" \
      --kubeconfig "$kubeconfig" --nodes edge-1,edge-2,edge-3 >"$sim_log" 2>&1 &
    echo $! >"$sim_pid"
    sleep 1
    running "$sim_pid" || fail "the legacy DaemonSet simulator exited" "$sim_log"
  fi

  local show_k show_bin show_state server agent_ns agents_line network_line
  network_line="  storage network: none (as root, make demo plays one: docs/local-site.md)"
  if running "$net_pid"; then
    local gate_line="LINSTOR gate: none (the release runs none)"
    if running "$gate_pid"; then gate_line="LINSTOR gate: pid $(cat "$gate_pid"), https://$gate_addr, log ${gate_log#"$root"/}"; fi
    network_line="  storage network: pid $(cat "$net_pid"), log ${net_log#"$root"/}, volumes $storage; $gate_line
  walk through a flip and a replication upgrade: docs/local-site.md#walkthrough"
  fi
  local os_line="  OS upgrade: none (this bin/agent-site plays no Kairos host)"
  if [ -f "$kairos_policy" ]; then
    local image name
    image=$(sed -n 's/^  image: //p' "$kairos_policy") name=$(sed -n 's/^  name: //p' "$kairos_policy")
    os_line="  OS upgrade: the nodes are played Kairos hosts on ${kairos_versions[0]}; once the cluster is Managed (docs/local-site.md#walkthrough),
  move them to ${kairos_versions[1]}, node by node, each proven booted (docs/local-site.md#an-os-upgrade-of-the-demos-nodes):
    kubectl apply -f $(from_root "$kairos_policy")
    kubectl get osvp $name -w                 # Phase, and Done: the nodes proven booted and soaked"
    if "$root/bin/kubectl-nodewright" os plan --help >/dev/null 2>&1; then
      os_line+="
  or, with the plugin: kubectl nodewright os plan --image $image --name $name --soak 30s --vm-protection Stop --wait"
    fi
  fi
  local boot_line="  boot recovery: none (the nodes are not played Kairos hosts, or the release has no BootRecoveryPolicy)"
  if [ -n "$kairos_hosts" ] && "${kubectl[@]}" get bootrecoverypolicy nodewright >/dev/null 2>&1; then
    boot_line="  boot recovery: the BootRecoveryPolicy nodewright follows every node's boot: a fallback named and held, a recovery boot cordoned
  (docs/local-site.md#boot-recovery-of-the-demos-nodes):
    kubectl get nwbr                          # the nodes that fell back, run their recovery system, or stayed unhealthy
    bin/kubectl-nodewright boot status        # each node's slot, image, boot, fallback, pin, post-boot health"
  fi
  show_k=$(from_root "$kubeconfig") show_bin=$(from_root "$k8s") show_state=$(from_root "$state")
  server=$("${kubectl[@]}" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  agent_ns=$(agent_namespace)
  agents_line="no agents (the release runs no agent DaemonSet)"
  if [ -n "$agent_ns" ]; then
    agents_line="pids"
    for n in "${demo_nodes[@]}"; do agents_line+=" $n=$(cat "$agents_dir/$n/agent.pid")"; done
    agents_line+=", logs ${agents_dir#"$root"/}/<node>/agent.log, Leases in $agent_ns"
  fi
  cat <<MSG

The local site is up, on 127.0.0.1 only (reach it from this machine; docs/local-site.md says how from another).
  kubeconfig:  $kubeconfig
  API server:  $server
  operator:    pid $(cat "$operator_pid"), log ${operator_log#"$root"/}, probes http://$probe_addr/readyz, metrics http://$metrics_addr/metrics
  legacy DaemonSet simulator: pid $(cat "$sim_pid"), log ${sim_log#"$root"/}, one transition every $step_interval
  site (edge-1's kubelet, KubeVirt, CSI on files): pid $(cat "$site_pid"), log ${site_log#"$root"/}
  node agents (edge-1, edge-2, edge-3): $agents_line
$network_line
$os_line
$boot_line

Try (from the repository root):
  export KUBECONFIG=$show_k PATH=$show_bin:\$PATH
  kubectl get nodes
  kubectl get crd
  kubectl get nodewright
  kubectl get nodewrightcluster -w          # watch the phase follow the simulated DaemonSet
  kubectl get nodewrightagentstatus         # one per node: role, heartbeat, DRBD, bond mode
  kubectl get leases -n ${agent_ns:-nodewright-agent} -w      # each agent's heartbeat, renewed every 10 s
  kubectl get nodeoperations -A              # the operations the agents run (none until a workflow asks)
  kubectl get daemonset,pods -n ${agent_ns:-nodewright-agent} -o wide   # the chart's DaemonSet: kwok plays its pods on edge-2, edge-3
  bin/legacy-sim silence edge-2              # then watch edge-2 go stale (resume edge-2 to undo)
  kubectl explain vmvolumemigration.spec
  kubectl get vm,vmi,pvc -n demo             # the demo VM on its ReadWriteOnce volume
  kubectl apply -n demo -f config/samples/nodewright_v1alpha1_vmvolumemigration.yaml
  kubectl get vmvm -n demo -w                # the steps, Validate to SnapshotTarget, with progress
  kubectl describe vmvm -n demo database-rootdisk   # steps, checksums, Events
  bin/nodewright-audit verify --public-key $show_state/audit-key.pub $show_state/audit   # the audit trail
  bin/kubectl-nodewright status              # the same, as the kubectl plugin shows it (kubectl nodewright ...)
  bin/kubectl-nodewright ui -n demo --trail-dir $show_state/audit --trail-key $show_state/audit-key.pub
                                             # the web UI: cluster, migrations (start one from the form), audit trail
  kubectl get edgeprofile                    # the demo's profile, signed with the demo's key: Verified True
  kubectl apply -f config/samples/nodewright_v1alpha1_edgeprofile.yaml   # refused: not signed
  kubectl apply -f config/samples/nodewright_v1alpha1_vmvolumemigration.yaml   # refused: no VM "database" in default

Stop it with: make demo-down
MSG
}

down() {
  stop "$sim_pid" "legacy DaemonSet simulator"
  stop_agents
  stop "$operator_pid" operator
  stop "$gate_pid" "LINSTOR gate"
  stop "$site_pid" site
  # SIGTERM: the network removes its namespaces and links.
  stop "$net_pid" "storage network"
  if [ -x "$k8s/kwokctl" ] && [ -d "$KWOK_WORKDIR/clusters/$cluster" ]; then
    say "deleting cluster $cluster"
    "${kwokctl[@]}" delete cluster >/dev/null 2>&1 || true
  fi
  # Components may take a few seconds to finish shutting down; anything still running from
  # the site's folder after that is a leftover: end it, and say so.
  local left i
  for i in $(seq 1 20); do
    left=$(pgrep -f "$state/" || true)
    [ -z "$left" ] && break
    sleep 0.5
  done
  if [ -n "$left" ]; then
    say "ending leftover processes: $(echo $left)"
    kill -KILL $left 2>/dev/null || true
  fi
  rm -rf "$state"
  say "down; no process left behind"
}

# upgrade: upgrades the release to $NODEWRIGHT_DEMO_CHART (the working tree's chart by
# default) and restarts the operator with the new Deployment's arguments.
upgrade() {
  check_loopback NODEWRIGHT_DEMO_PROBE_ADDR "$probe_addr"
  check_loopback NODEWRIGHT_DEMO_METRICS_ADDR "$metrics_addr"
  check_loopback NODEWRIGHT_DEMO_GATE_ADDR "$gate_addr"
  check_loopback NODEWRIGHT_DEMO_GATE_PROBE_ADDR "$gate_probe_addr"
  check_patience
  trap 'fail "this step failed: $BASH_COMMAND" "$(component_log kube-apiserver)"' ERR
  # The operator stops before the new CRDs and RBAC go in, as a pod of the old Deployment would
  # be replaced: the site runs this tree's operator before the upgrade too, and left running it
  # would watch the new kinds as soon as their CRDs are applied, refused by the old chart's
  # role until the upgrade replaces it.
  stop "$operator_pid" operator
  install_chart upgrade
  stop "$gate_pid" "LINSTOR gate"
  running "$net_pid" && start_gate
  start_operator
  stop_agents
  start_agents
  start_boot_policy
  say "upgraded; $("$helm" list --kubeconfig "$kubeconfig" -n nodewright-system -o json | grep -o '"chart":"[^"]*"')"
}

case "${1:-}" in
  up) up ;;
  upgrade) upgrade ;;
  stop-operator) stop "$operator_pid" operator ;;
  stop-agents) stop_agents ;;
  stop-legacy-sim) stop "$sim_pid" "legacy DaemonSet simulator" ;;
  fault)
    shift
    running "$net_pid" || fail "the storage network is not running (make demo as root starts it)"
    "$root/bin/nodewright-site" fault --dir "$net_dir" "$@"
    ;;
  down) down ;;
  *) echo "usage: $0 up|upgrade|stop-operator|stop-agents|stop-legacy-sim|fault ARGS|down" >&2; exit 2 ;;
esac
