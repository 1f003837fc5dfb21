#!/usr/bin/env bash
# The fleet demo: a fleet hub and three member sites on this machine (docs/demo-fleet.md).
# One etcd; four kube-apiservers on it, each under its own prefix (/hub, /site-a, /site-b,
# /site-c) with its own CA and ServiceAccount signing key. Each member has Nodewright's chart
# installed with helm (fleet.hubReader on, its ServiceAccount created by the chart), its
# operator running as the chart's ServiceAccount, the legacy DaemonSet simulator keeping it
# MultiNode, and a witness receiving its audit trail. The hub has its chart
# (charts/nodewright-fleet) installed on the hub's API server, and nodewright-fleet runs as the
# chart's ServiceAccount with the arguments of the chart's Deployment; it reads each member
# through a kubeconfig Secret made as docs/fleet.md says, from the token of the member's
# hub-reader ServiceAccount. site-c's audit trail is lost and restarted, which its witness
# catches and the hub shows. As root, site-b gets three Nodes whose agents run in network
# namespaces of their own on a played storage network (nodewright-site network), is handed
# over to Managed, and runs a bond mode flip that waits for approval of its first node.
# Everything it writes stays in .demo-fleet/.
#
#   hack/demo-fleet.sh up     start it (idempotent: what runs is reused)
#   hack/demo-fleet.sh down   stop every process it started and remove its state
#
# Environment: NODEWRIGHT_FLEET_DEMO_DIR (state folder, default .demo-fleet),
# NODEWRIGHT_FLEET_DEMO_PORT (the first of the 46 loopback ports it uses, 16400) and
# NODEWRIGHT_FLEET_DEMO_PATIENCE (the limit of each wait, 300 seconds). NODEWRIGHT_DEMO_NETWORK=off
# leaves site-b without its storage network, agents and flip (as without root).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"

k8s="$root/bin/k8s/$KUBE_VERSION"
helm="$root/bin/tools/helm-$HELM_VERSION"
state=${NODEWRIGHT_FLEET_DEMO_DIR:-$root/.demo-fleet}
base=${NODEWRIGHT_FLEET_DEMO_PORT:-16400}
patience=${NODEWRIGHT_FLEET_DEMO_PATIENCE:-300}
members=(site-a site-b site-c)
# The member that runs a flip (as root), its nodes and the agents' namespace (the member chart's
# agent.namespace).
flip_member=site-b
flip_nodes=(edge-1 edge-2 edge-3)
agent_ns=nodewright-agent
kubeconfig="$state/kubeconfig"
# The hub's namespaces, as the hub chart's (its release namespace and inventory).
hub_ns=nodewright-fleet
inventory_ns=fleet-inventory
member_ns=nodewright-system
# How long the hub waits for a checkpoint to be countersigned before it says NotWitnessed (the
# hub chart's auditWitness.grace; 10m by default, shorter here so that the demo shows it).
witness_grace=30s
export NODEWRIGHT_PROFILE_PASSWORD=demo

say() { printf 'demo-fleet: %s\n' "$*"; }
fail() {
  printf 'demo-fleet: FAILED: %s\n' "$1" >&2
  [ -n "${2:-}" ] && printf 'demo-fleet: see the log: %s\n' "$2" >&2
  exit 1
}

# Ports, all on 127.0.0.1: etcd base+0 (peer base+1); the API servers base+10 (hub) and
# base+11.. (members); the hub's probes base+20, metrics base+21; member i (1..3): the
# operator's probes base+30+4i, metrics +1, webhooks +2, the witness receiver +3.
port_of() {
  case $1 in
    etcd) echo $((base)) ;;
    etcd-peer) echo $((base + 1)) ;;
    hub) echo $((base + 10)) ;;
    hub-probes) echo $((base + 20)) ;;
    hub-metrics) echo $((base + 21)) ;;
    *) fail "no port for $1" ;;
  esac
}
member_index() { local i; for i in "${!members[@]}"; do [ "${members[$i]}" = "$1" ] && echo $((i + 1)) && return; done; }
apiserver_port() { if [ "$1" = hub ]; then port_of hub; else echo $((base + 10 + $(member_index "$1"))); fi; }
member_port() { # member what
  local i off
  i=$(member_index "$1")
  case $2 in probes) off=0 ;; metrics) off=1 ;; webhook) off=2 ;; witness) off=3 ;; esac
  echo $((base + 30 + 4 * i + off))
}

alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
running() { [ -f "$1" ] && alive "$(cat "$1")"; }

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

# start NAME PIDFILE LOG COMMAND...: runs COMMAND in the background unless it runs already.
start() {
  local name=$1 pidfile=$2 log=$3
  shift 3
  if running "$pidfile"; then
    say "$name is already running (pid $(cat "$pidfile"))"
    return
  fi
  nohup "$@" >>"$log" 2>&1 &
  echo $! >"$pidfile"
}

# port_free PORT: nothing listens on 127.0.0.1:PORT.
port_free() {
  if { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; then
    exec 3<&-
    return 1
  fi
}

# http_ok PORT PATH: an HTTP GET on 127.0.0.1:PORT answers 200.
http_ok() {
  local status
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$2" "$1" >&3
  read -r _ status _ <&3 || status=
  exec 3<&-
  [ "$status" = 200 ]
}

# wait_for WHAT LOG PIDFILE COMMAND...: polls COMMAND every half second until it succeeds, at
# most $patience seconds, failing at once if PIDFILE's process exits.
wait_for() {
  local what=$1 log=$2 pidfile=$3 i
  shift 3
  for i in $(seq 1 $((patience * 2))); do
    if [ -n "$pidfile" ] && ! running "$pidfile"; then fail "$what: the process exited" "$log"; fi
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  fail "$what: not within ${patience}s" "$log"
}

kc() { "$k8s/kubectl" --kubeconfig "$kubeconfig" --context "$1" "${@:2}"; }

# certs NAME: a CA of its own for the API server NAME, its serving certificate (127.0.0.1,
# localhost), an admin client certificate (system:masters) and a ServiceAccount signing key.
certs() {
  local d="$state/$1/pki"
  [ -f "$d/admin.crt" ] && return
  mkdir -p "$d"
  (
    umask 077
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
      -subj "/CN=$1-ca" -days 7 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout serving.key -out serving.csr \
      -subj "/CN=$1-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >serving.ext
    openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out serving.crt -days 7 \
      -extfile serving.ext 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout admin.key -out admin.csr \
      -subj "/O=system:masters/CN=$1-admin" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >admin.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 7 \
      -extfile admin.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

# start_apiserver NAME: the API server of NAME on the shared etcd under /NAME. It runs
# without the priority-and-fairness machinery, the watch cache and the endpoint reconciler,
# as the fleet benchmark's members do, so that four fit a small machine.
start_apiserver() {
  local name=$1 port d
  port=$(apiserver_port "$name")
  d="$state/$name"
  certs "$name"
  if ! running "$d/apiserver.pid"; then
    port_free "$port" || fail "port $port (the API server of $name) is taken: set NODEWRIGHT_FLEET_DEMO_PORT to another base"
  fi
  say "starting the API server of $name on https://127.0.0.1:$port (etcd prefix /$name)"
  start "the API server of $name" "$d/apiserver.pid" "$d/apiserver.log" "$k8s/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$(port_of etcd)" --etcd-prefix "/$name" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --tls-cert-file "$d/pki/serving.crt" --tls-private-key-file "$d/pki/serving.key" \
    --client-ca-file "$d/pki/ca.crt" \
    --service-account-issuer "https://$name.demo-fleet.invalid" \
    --service-account-key-file "$d/pki/sa.pub" --service-account-signing-key-file "$d/pki/sa.key" \
    --authorization-mode RBAC --service-cluster-ip-range 10.0.0.0/24 \
    --watch-cache=false --enable-priority-and-fairness=false --endpoint-reconciler-type=none
  # The context NAME of the demo's kubeconfig: the API server's admin.
  "$k8s/kubectl" --kubeconfig "$kubeconfig" config set-cluster "$name" --server "https://127.0.0.1:$port" \
    --certificate-authority "$d/pki/ca.crt" --embed-certs >/dev/null
  "$k8s/kubectl" --kubeconfig "$kubeconfig" config set-credentials "$name-admin" \
    --client-certificate "$d/pki/admin.crt" --client-key "$d/pki/admin.key" --embed-certs >/dev/null
  "$k8s/kubectl" --kubeconfig "$kubeconfig" config set-context "$name" --cluster "$name" --user "$name-admin" >/dev/null
}

# sa_kubeconfig CONTEXT NAMESPACE SERVICEACCOUNT FILE: a kubeconfig for the API server of
# CONTEXT with a 48h token of the ServiceAccount, as a pod of it would hold.
sa_kubeconfig() {
  local server ca token
  server=$("$k8s/kubectl" --kubeconfig "$kubeconfig" config view --raw -o jsonpath="{.clusters[?(@.name==\"$1\")].cluster.server}")
  ca=$("$k8s/kubectl" --kubeconfig "$kubeconfig" config view --raw -o jsonpath="{.clusters[?(@.name==\"$1\")].cluster.certificate-authority-data}")
  token=$(kc "$1" create token -n "$2" "$3" --duration 48h)
  (
    umask 077
    printf 'apiVersion: v1\nkind: Config\ncurrent-context: %s\n' "$1"
    printf 'clusters:\n- name: %s\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n' "$1" "$server" "$ca"
    printf 'users:\n- name: %s\n  user:\n    token: %s\n' "$3" "$token"
    printf 'contexts:\n- name: %s\n  context:\n    cluster: %s\n    user: %s\n' "$1" "$1" "$3"
  ) >"$4"
}

# deployment_args CONTEXT NAMESPACE NAME [GREP-V-PATTERN...]: the container arguments of a
# Deployment, one a line, without those matching the patterns.
deployment_args() {
  local ctx=$1 ns=$2 name=$3 filter=(-e '^$')
  shift 3
  local p
  for p in "$@"; do filter+=(-e "$p"); done
  kc "$ctx" get deployment -n "$ns" "$name" \
    -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}' | grep -v "${filter[@]}"
}

# start_operator MEMBER: the member's operator, as demo.sh runs the local site's: the chart
# Deployment's arguments, a token of the chart's ServiceAccount, the demo's audit trail, which
# it ships to the member's witness.
start_operator() {
  local m=$1 d="$state/$1" args=()
  if running "$d/operator.pid"; then
    say "the operator of $m is already running (pid $(cat "$d/operator.pid"))"
    return
  fi
  sa_kubeconfig "$m" "$member_ns" nodewright-operator "$d/operator.kubeconfig"
  mapfile -t args < <(deployment_args "$m" "$member_ns" nodewright-operator '^--health-probe-bind-address=' '^--metrics-bind-address=')
  [ "${#args[@]}" -gt 0 ] || fail "the chart's Deployment on $m has no operator arguments" "$d/helm.log"
  say "starting the operator of $m as ServiceAccount $member_ns/nodewright-operator (log: ${d#"$root"/}/operator.log)"
  start "the operator of $m" "$d/operator.pid" "$d/operator.log" "$root/bin/operator" --kubeconfig "$d/operator.kubeconfig" "${args[@]}" \
    --audit-dir "$d/audit" --audit-key-file "$d/audit-key.pem" --audit-checkpoint-interval 5s \
    --audit-checkpoint-configmap "$member_ns/nodewright-audit-checkpoint" \
    --audit-ship-url "http://127.0.0.1:$(member_port "$m" witness)/" \
    --health-probe-bind-address "127.0.0.1:$(member_port "$m" probes)" --metrics-bind-address "127.0.0.1:$(member_port "$m" metrics)" \
    --webhook-host 127.0.0.1 --webhook-cert-hosts 127.0.0.1
  wait_for "the operator of $m to be ready" "$d/operator.log" "$d/operator.pid" http_ok "$(member_port "$m" probes)" /readyz
}

# start_token_controller MEMBER: the token controller of a kube-controller-manager (that
# controller alone), which fills ServiceAccount token Secrets as on a cluster: the member
# chart's nodewright-fleet-hub-token, which registering the member reads (docs/fleet.md).
start_token_controller() {
  local m=$1 d="$state/$1"
  start "the token controller of $m" "$d/token-controller.pid" "$d/token-controller.log" "$k8s/kube-controller-manager" \
    --kubeconfig "$d/admin.kubeconfig" --controllers serviceaccount-token --leader-elect=false \
    --service-account-private-key-file "$d/pki/sa.key" --root-ca-file "$d/pki/ca.crt" \
    --bind-address 127.0.0.1 --secure-port 0
}

# up_member MEMBER: the member's API server, chart, operator, witness and simulator.
up_member() {
  local m=$1 d="$state/$1"
  mkdir -p "$d"
  wait_for "the API server of $m" "$d/apiserver.log" "$d/apiserver.pid" kc "$m" get --raw /readyz
  [ -f "$d/audit-key.pem" ] || "$root/bin/nodewright-audit" keygen --private-key "$d/audit-key.pem" --public-key "$d/audit-key.pub" >/dev/null
  [ -f "$d/witness.pem" ] || "$root/bin/nodewright-audit" keygen --private-key "$d/witness.pem" --public-key "$d/witness.pub" >/dev/null
  # The witness: the receiver the member's trail is shipped to, countersigning what it holds.
  start "the witness of $m" "$d/witness.pid" "$d/witness.log" "$root/bin/nodewright-audit" serve \
    --listen "127.0.0.1:$(member_port "$m" witness)" --dir "$d/witness" \
    --public-key "$d/audit-key.pub" --witness-key "$d/witness.pem"
  # As on a cluster: the legacy DaemonSet's namespace first, the operator's restricted.
  kc "$m" create namespace node-init --dry-run=client -o yaml | kc "$m" apply -f - >/dev/null
  kc "$m" create namespace "$member_ns" --dry-run=client -o yaml | kc "$m" apply -f - >/dev/null
  kc "$m" label namespace "$member_ns" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
  say "helm: Nodewright from charts/nodewright on $m (values: config/demo/fleet-member-values.yaml)"
  # No --wait: a member has no controller-manager or nodes, so its Deployment never has pods.
  "$helm" upgrade --install nodewright "$root/charts/nodewright" --kubeconfig "$kubeconfig" --kube-context "$m" \
    -n "$member_ns" -f "$root/config/demo/fleet-member-values.yaml" \
    --set webhook.port="$(member_port "$m" webhook)" --set webhook.service.port="$(member_port "$m" webhook)" \
    --set-file 'profile.trustedKeys.demo\.pub'="$state/profile.pub" >"$d/helm.log" 2>&1 ||
    fail "helm on $m failed" "$d/helm.log"
  start_token_controller "$m"
  start_operator "$m"
  kc "$m" apply -f "$state/edgeprofile.yaml" >/dev/null
  wait_for "the operator of $m to apply the NodewrightCluster" "$d/operator.log" "$d/operator.pid" kc "$m" get nodewrightcluster nodewright
  # The legacy DaemonSet the sample cluster observes: bootstrap and the upgrade to three
  # nodes, then heartbeats, so that the member stays MultiNode.
  start "the legacy DaemonSet simulator of $m" "$d/legacy-sim.pid" "$d/legacy-sim.log" "$root/bin/legacy-sim" run \
    --scenario upgrade --step-interval 0s --kubeconfig "$d/admin.kubeconfig" --nodes edge-1,edge-2,edge-3
}

# flip_wanted: true when site-b gets its storage network, agents and flip: as root, with
# iproute2, unless NODEWRIGHT_DEMO_NETWORK=off. flip_skipped says in one line why not.
flip_wanted() {
  [ "${NODEWRIGHT_DEMO_NETWORK:-}" != off ] && [ "$(id -u)" = 0 ] && command -v ip >/dev/null
}
flip_skipped() {
  local why="not root (network namespaces need root)"
  [ "$(id -u)" = 0 ] && why="no iproute2 (ip)"
  [ "${NODEWRIGHT_DEMO_NETWORK:-}" = off ] && why="NODEWRIGHT_DEMO_NETWORK=off"
  say "$why: $flip_member has no storage network and no agents, so it stays in Observe and shows no flip"
}

# make_nodes MEMBER: the member's Node objects, Ready as a kubelet would say, written here:
# there is no kubelet (and no node lifecycle controller to say otherwise). The agents' tokens
# are bound to them, and a Managed cluster's nodes are its Nodes.
make_nodes() {
  local m=$1 n now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for n in "${flip_nodes[@]}"; do
    printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n  labels:\n    kubernetes.io/hostname: %s\n    kubernetes.io/os: linux\n' "$n" "$n" |
      kc "$m" apply -f - >/dev/null
    kc "$m" patch node "$n" --subresource=status --type=merge -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"written by hack/demo-fleet.sh: no kubelet runs\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" >/dev/null
  done
}

# start_network MEMBER: the played storage network of its nodes (nodewright-site network, as
# hack/demo.sh starts the local site's): each node in a network namespace of its own with a
# bond0 on a played switch, the bonds in the profile's mode, the switch ports also carrying its
# allowedBondModes, DRBD and LINSTOR played, and a forwarder to the member's API server. It
# writes what it made into <member>/net, and "ready" once up; SIGTERM removes the namespaces.
start_network() {
  local m=$1 d="$state/$1" mode also i
  if running "$d/net.pid"; then
    say "the storage network of $m is already running (pid $(cat "$d/net.pid"))"
    return
  fi
  mode=$(sed -n 's/^ *bondMode: *//p' "$root/config/demo/edgeprofile.yaml")
  also=$(sed -n 's/^ *allowedBondModes: *\[\(.*\)\]/\1/p' "$root/config/demo/edgeprofile.yaml" | tr -d '" ')
  say "starting the storage network of $m: ${flip_nodes[*]} in network namespaces, bonds in $mode, DRBD and LINSTOR played (log: ${d#"$root"/}/net.log)"
  start "the storage network of $m" "$d/net.pid" "$d/net.log" "$root/bin/nodewright-site" network \
    --kubeconfig "$d/admin.kubeconfig" --dir "$d/net" --nodes "$(IFS=,; echo "${flip_nodes[*]}")" \
    --mode "$mode" --also-carry "$also"
  wait_for "the storage network of $m" "$d/net.log" "$d/net.pid" test -f "$d/net/ready"
}

# start_agents MEMBER: the node agent of each node, as hack/demo.sh runs the local site's and
# the DaemonSet's pods would: the DaemonSet's arguments, NODE_NAME and POD_NAMESPACE, a token of
# the chart's ServiceAccount bound to the node's Node object (so exactly the chart's RBAC and
# admission policy), in the node's network namespace on its played bond and DRBD, reaching the
# API server through the network's forwarder.
start_agents() {
  local m=$1 d="$state/$1" args=() n dir token server server_name ca
  server=$("$k8s/kubectl" --kubeconfig "$d/net/nodes.kubeconfig" config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  server_name=$("$k8s/kubectl" --kubeconfig "$d/net/nodes.kubeconfig" config view --raw --minify -o jsonpath='{.clusters[0].cluster.tls-server-name}')
  ca=$("$k8s/kubectl" --kubeconfig "$kubeconfig" config view --raw -o jsonpath="{.clusters[?(@.name==\"$m\")].cluster.certificate-authority-data}")
  mapfile -t args < <(kc "$m" get daemonset -n "$agent_ns" nodewright-agent \
    -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}' |
    grep -v -e '^$' -e '^--host-root=' -e '^--state-dir=')
  [ "${#args[@]}" -gt 0 ] || fail "the chart's agent DaemonSet on $m has no arguments" "$d/helm.log"
  for n in "${flip_nodes[@]}"; do
    dir="$d/agents/$n"
    if running "$dir/agent.pid"; then
      say "the agent of $m's $n is already running (pid $(cat "$dir/agent.pid"))"
      continue
    fi
    mkdir -p "$dir/state"
    token=$(kc "$m" create token -n "$agent_ns" nodewright-agent --bound-object-kind Node --bound-object-name "$n" --duration 48h)
    (
      umask 077
      printf 'apiVersion: v1\nkind: Config\ncurrent-context: %s\n' "$n"
      printf 'clusters:\n- name: %s\n  cluster:\n    server: %s\n    tls-server-name: %s\n    certificate-authority-data: %s\n' "$m" "$server" "$server_name" "$ca"
      printf 'users:\n- name: nodewright-agent\n  user:\n    token: %s\n' "$token"
      printf 'contexts:\n- name: %s\n  context:\n    cluster: %s\n    user: nodewright-agent\n' "$n" "$m"
    ) >"$dir/kubeconfig"
    start "the agent of $m's $n" "$dir/agent.pid" "$dir/agent.log" \
      env NODE_NAME="$n" POD_NAMESPACE="$agent_ns" ip netns exec "$(cat "$d/net/$n/netns")" "$root/bin/agent-site" --kubeconfig "$dir/kubeconfig" "${args[@]}" \
      --host-root "$d/net/$n/root" --state-dir "$dir/state" --network-backend site \
      --site-bond-dir "$d/net/$n/bond" --site-drbd-dir "$d/net/$n/drbd"
  done
  say "started the agents of $m's ${flip_nodes[*]} as ServiceAccount $agent_ns/nodewright-agent (logs: ${d#"$root"/}/agents/<node>/agent.log)"
  for n in "${flip_nodes[@]}"; do
    wait_for "the agent of $m's $n to renew its Lease" "$d/agents/$n/agent.log" "$d/agents/$n/agent.pid" \
      lease_renewed "$m" "$n"
  done
}
lease_renewed() { [ -n "$(kc "$1" get lease -n "$agent_ns" "$2" -o jsonpath='{.spec.renewTime}' 2>/dev/null)" ]; }

# agent_ready MEMBER NODE: the node's agent reports its bond and every DRBD resource connected
# and UpToDate (what a flip's Preflight needs).
agent_ready() {
  local s reporter mode res conn up
  s=$(kc "$1" get nodewrightagentstatus "$2" \
    -o go-template='{{with .status}}{{.reporter}} {{with .network}}{{with .bond}}{{.mode}}{{end}}{{end}} {{with .storage}}{{.resources}} {{.connected}} {{.upToDate}}{{end}}{{end}}' 2>/dev/null) || return 1
  read -r reporter mode res conn up <<<"$s"
  [ "$reporter" = Agent ] && [ -n "$mode" ] && [ -n "$res" ] && [ "$res" -gt 0 ] && [ "$conn" = "$res" ] && [ "$up" = "$res" ]
}

# flip MEMBER: the member handed over to Managed as docs/local-site.md's walkthrough does (the
# legacy simulator stopped, its DaemonSet deleted), then a flip to 802.3ad approved node by
# node; it runs its Preflight and waits for the approval of Node1.
flip() {
  local m=$1 d="$state/$1" n
  make_nodes "$m"
  start_network "$m"
  start_agents "$m"
  if ! managed "$m"; then
    say "handing $m over to Managed: its legacy DaemonSet stops, the agents report"
    stop "$d/legacy-sim.pid" "legacy DaemonSet simulator of $m"
    # Background deletion: it has no pods, and no garbage collector runs here to finish a
    # foreground one.
    kc "$m" delete daemonset -n node-init node-init --ignore-not-found >/dev/null
    kc "$m" patch nwc nodewright --type merge -p '{"spec":{"management":"Managed"}}' >/dev/null
    wait_for "$m to be Managed" "$d/operator.log" "$d/operator.pid" managed "$m"
  fi
  for n in "${flip_nodes[@]}"; do
    wait_for "the agent of $m's $n to report its bond and DRBD in sync" "$d/agents/$n/agent.log" "$d/agents/$n/agent.pid" \
      agent_ready "$m" "$n"
  done
  if ! kc "$m" get bmfp to-lacp >/dev/null 2>&1; then
    say "on $m: kubectl nodewright flip --to 802.3ad --approval Manual --name to-lacp"
    "$root/bin/kubectl-nodewright" flip --kubeconfig "$kubeconfig" --context "$m" --to 802.3ad --approval Manual --name to-lacp >>"$d/flip.log" 2>&1 ||
      fail "the flip on $m was refused" "$d/flip.log"
  fi
  wait_for "$m's flip to wait for the approval of Node1" "$d/operator.log" "$d/operator.pid" \
    waiting_for "$m" Node1
}
managed() { [ "$(kc "$1" get nwc nodewright -o jsonpath='{.status.management}' 2>/dev/null)" = Managed ]; }
waiting_for() { [ "$(kc "$1" get bmfp to-lacp -o jsonpath='{.status.steps[?(@.state=="Waiting")].name}' 2>/dev/null)" = "$2" ]; }

# summary_field MEMBER JSONPATH: a field of the member's summary on the hub.
summary_field() { kc hub get nodewrightclustersummary "kubeconfig.$1" -o "jsonpath=$2" 2>/dev/null; }
is() { [ "$(summary_field "$1" "$2")" = "$3" ]; }

up() {
  [[ $base =~ ^[1-9][0-9]{3,4}$ ]] && [ "$base" -le 65489 ] ||
    fail "NODEWRIGHT_FLEET_DEMO_PORT=$base: must be a port from 1000 to 65489 (the first of 46 it uses)"
  [[ $patience =~ ^[1-9][0-9]{0,5}$ ]] ||
    fail "NODEWRIGHT_FLEET_DEMO_PATIENCE=$patience: must be a whole number of seconds from 1 to 999999"
  local b
  for b in operator legacy-sim nodewright-audit nodewright-profile nodewright-fleet kubectl-nodewright; do
    [ -x "$root/bin/$b" ] || fail "bin/$b is missing: run 'make demo-fleet', which builds it"
  done
  [ -x "$k8s/kube-apiserver" ] || fail "the control plane is not built: run 'make demo-fleet', which builds it"
  [ -x "$helm" ] || fail "helm is not built: run 'make demo-fleet', which builds it"
  if flip_wanted; then
    for b in nodewright-site agent-site; do
      [ -x "$root/bin/$b" ] || fail "bin/$b is missing: run 'make demo-fleet', which builds it"
    done
  fi
  mkdir -p "$state/etcd"
  trap 'fail "this step failed: $BASH_COMMAND"' ERR

  if ! running "$state/etcd/etcd.pid"; then
    port_free "$(port_of etcd)" || fail "port $(port_of etcd) (etcd) is taken: set NODEWRIGHT_FLEET_DEMO_PORT to another base"
  fi
  say "starting etcd on 127.0.0.1:$(port_of etcd) (one for the hub and the members, each under its own prefix)"
  start etcd "$state/etcd/etcd.pid" "$state/etcd/etcd.log" "$k8s/etcd" --data-dir "$state/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$(port_of etcd)" --advertise-client-urls "http://127.0.0.1:$(port_of etcd)" \
    --listen-peer-urls "http://127.0.0.1:$(port_of etcd-peer)" --initial-advertise-peer-urls "http://127.0.0.1:$(port_of etcd-peer)" \
    --initial-cluster "default=http://127.0.0.1:$(port_of etcd-peer)" --listen-metrics-urls "" \
    --quota-backend-bytes 1073741824
  wait_for "etcd" "$state/etcd/etcd.log" "$state/etcd/etcd.pid" http_ok "$(port_of etcd)" /health

  local m
  for m in hub "${members[@]}"; do start_apiserver "$m"; done
  for m in "${members[@]}"; do
    "$k8s/kubectl" --kubeconfig "$kubeconfig" config view --raw --minify --flatten --context "$m" >"$state/$m/admin.kubeconfig"
    chmod 600 "$state/$m/admin.kubeconfig"
  done
  "$k8s/kubectl" --kubeconfig "$kubeconfig" config use-context hub >/dev/null
  chmod 600 "$kubeconfig"

  # The local site's EdgeProfile (its bond in active-backup, the switch also carrying 802.3ad),
  # signed with a key made for the demo; each member trusts it.
  [ -f "$state/profile.key" ] || "$root/bin/nodewright-profile" keygen --output-key-prefix "$state/profile" >/dev/null 2>&1
  "$root/bin/nodewright-profile" sign --key "$state/profile.key" "$root/config/demo/edgeprofile.yaml" >"$state/edgeprofile.yaml"

  for m in "${members[@]}"; do up_member "$m"; done
  up_hub
  register_members

  if flip_wanted; then flip "$flip_member"; else flip_skipped; fi
  break_checkpoint site-c
  for m in "${members[@]}"; do
    wait_for "the hub to see $m's NodewrightCluster" "$state/hub/hub.log" "$state/hub/hub.pid" \
      is "$m" '{.status.phase}' MultiNode
  done
  if flip_wanted; then
    wait_for "the hub to see $flip_member's flip" "$state/hub/hub.log" "$state/hub/hub.pid" \
      is "$flip_member" '{.status.workflows[0].name}' to-lacp
  fi
  trap - ERR
  message
}

# up_hub: the hub's chart (charts/nodewright-fleet) on the hub's API server, its CRDs from the
# chart's crds/ (the fleet's and the inventory's ClusterProfile), the witnesses' keys and a
# shorter grace as its values; then the hub itself, as hack/demo.sh runs the operator: the
# arguments of the chart's Deployment, as the chart's ServiceAccount with a token, and only the
# demo's additions (the witness keys' files, loopback addresses).
up_hub() {
  local d="$state/hub" args=() m set_keys=()
  wait_for "the hub's API server" "$d/apiserver.log" "$d/apiserver.pid" kc hub get --raw /readyz
  # Helm installs crds/ on the first install and never upgrades them: applied first, as an
  # upgrade of the chart would be, so that a second up finds them too.
  kc hub apply --server-side -f "$root/charts/nodewright-fleet/crds" >/dev/null
  kc hub wait --for=condition=Established crd --all --timeout="${patience}s" >/dev/null
  kc hub create namespace "$hub_ns" --dry-run=client -o yaml | kc hub apply -f - >/dev/null
  kc hub label namespace "$hub_ns" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
  kc hub create namespace "$inventory_ns" --dry-run=client -o yaml | kc hub apply -f - >/dev/null
  for m in "${members[@]}"; do set_keys+=(--set-file "auditWitness.publicKeys.$m\\.pub=$state/$m/witness.pub"); done
  say "helm: the fleet hub from charts/nodewright-fleet on the hub (inventory $inventory_ns, the members' witness keys, grace $witness_grace)"
  # No --wait: the hub cluster has no nodes, so the Deployment never has pods; the hub runs here.
  "$helm" upgrade --install nodewright-fleet "$root/charts/nodewright-fleet" --kubeconfig "$kubeconfig" --kube-context hub \
    -n "$hub_ns" --set clusterProfileNamespace="$inventory_ns" --set memberNamespace="$member_ns" \
    --set auditWitness.grace="$witness_grace" "${set_keys[@]}" >"$d/helm.log" 2>&1 ||
    fail "helm on the hub failed" "$d/helm.log"
  if running "$d/hub.pid"; then
    say "the hub is already running (pid $(cat "$d/hub.pid"))"
    return
  fi
  sa_kubeconfig hub "$hub_ns" nodewright-fleet "$d/hub.kubeconfig"
  mapfile -t args < <(deployment_args hub "$hub_ns" nodewright-fleet \
    '^--health-probe-bind-address=' '^--metrics-bind-address=' '^--audit-witness-public-key=')
  [ "${#args[@]}" -gt 0 ] || fail "the chart's Deployment on the hub has no arguments" "$d/helm.log"
  # The chart mounts the keys from its ConfigMap nodewright-fleet-witness-keys; here they are
  # the witnesses' files.
  for m in "${members[@]}"; do args+=(--audit-witness-public-key="$state/$m/witness.pub"); done
  say "starting the hub as ServiceAccount $hub_ns/nodewright-fleet (log: ${d#"$root"/}/hub.log)"
  start "the hub" "$d/hub.pid" "$d/hub.log" "$root/bin/nodewright-fleet" --kubeconfig "$d/hub.kubeconfig" "${args[@]}" \
    --health-probe-bind-address="127.0.0.1:$(port_of hub-probes)" --metrics-bind-address="127.0.0.1:$(port_of hub-metrics)"
  wait_for "the hub to be ready" "$d/hub.log" "$d/hub.pid" http_ok "$(port_of hub-probes)" /readyz
}

# register_members: a kubeconfig Secret on the hub for each member, as docs/fleet.md
# ("Registering a member") makes it: the token and CA the member's API server wrote into the
# Secret nodewright-fleet-hub-token of the member chart (fleet.hubReader.serviceAccount.create),
# and the member's server.
register_members() {
  local m d server
  for m in "${members[@]}"; do
    d="$state/$m"
    if kc hub get secret -n "$hub_ns" "$m" >/dev/null 2>&1; then continue; fi
    wait_for "the token of $m's hub reader (Secret $member_ns/nodewright-fleet-hub-token)" "$d/token-controller.log" "" \
      token_filled "$m"
    server=$(kc "$m" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
    (
      umask 077
      cd "$d"
      rm -f hub-reader.kubeconfig
      kc "$m" -n "$member_ns" get secret nodewright-fleet-hub-token -o jsonpath='{.data.token}' | base64 -d >token
      kc "$m" -n "$member_ns" get secret nodewright-fleet-hub-token -o jsonpath='{.data.ca\.crt}' | base64 -d >ca.crt
      k=("$k8s/kubectl" config --kubeconfig=hub-reader.kubeconfig)
      "${k[@]}" set-cluster "$m" --server="$server" --certificate-authority=ca.crt --embed-certs=true >/dev/null
      "${k[@]}" set-credentials fleet-hub --token="$(cat token)" >/dev/null
      "${k[@]}" set-context "$m" --cluster="$m" --user=fleet-hub >/dev/null
      "${k[@]}" use-context "$m" >/dev/null
      kc hub -n "$hub_ns" create secret generic "$m" --from-file=kubeconfig=hub-reader.kubeconfig >/dev/null
      kc hub -n "$hub_ns" label secret "$m" sigs.k8s.io/multicluster-runtime-kubeconfig=true >/dev/null
      rm token ca.crt hub-reader.kubeconfig
    )
    say "registered $m on the hub: Secret $hub_ns/$m with the token of $m's $member_ns/nodewright-fleet-hub"
  done
  for m in "${members[@]}"; do
    wait_for "the hub to reach $m" "$state/hub/hub.log" "$state/hub/hub.pid" \
      is "$m" '{.status.conditions[?(@.type=="Reachable")].status}' True
  done
}
token_filled() { [ -n "$(kc "$1" -n "$member_ns" get secret nodewright-fleet-hub-token -o jsonpath='{.data.token}' 2>/dev/null)" ]; }

# break_checkpoint MEMBER: the member's audit trail is lost after the witness countersigned
# it: the operator stops, its trail folder is replaced by an empty one (a volume lost or
# swapped), and it starts again with the same key. The trail it writes anew can never be
# countersigned (the witness's copy holds the old one), and the hub, which recorded the
# witnessed checkpoint, says so (CheckpointConsistent False, NotWitnessed).
break_checkpoint() {
  local m=$1 d="$state/$1"
  if [ -f "$d/trail-replaced" ]; then return; fi
  wait_for "a checkpoint of $m countersigned by its witness, recorded on the hub" "$state/hub/hub.log" "$state/hub/hub.pid" \
    is "$m" '{.status.conditions[?(@.type=="CheckpointConsistent")].reason}' Consistent
  say "breaking $m's audit trail: the operator restarts on an empty trail folder, which its witness never countersigns"
  stop "$d/operator.pid" "operator of $m"
  rm -rf "$d/audit.lost"
  mv "$d/audit" "$d/audit.lost"
  touch "$d/trail-replaced"
  start_operator "$m"
  # The new trail gets records: DRBD resyncs the legacy DaemonSet goes through, which the
  # operator observes and records. Until the new trail is longer than the witnessed one, the
  # operator publishes the witnessed checkpoint the witness hands back (it never publishes one
  # behind it), and the hub sees nothing wrong; past it, the new trail's checkpoints are never
  # countersigned, and once the hub's grace has passed it says NotWitnessed.
  local s i
  for i in $(seq 1 8); do
    for s in DRBD_DEGRADED RESYNCING MULTI_NODE_READY; do
      "$root/bin/legacy-sim" set-state "$s" --kubeconfig "$d/admin.kubeconfig" >>"$d/legacy-sim.log" 2>&1
    done
  done
  wait_for "the hub to find $m's checkpoint inconsistent" "$state/hub/hub.log" "$state/hub/hub.pid" \
    is "$m" '{.status.conditions[?(@.type=="CheckpointConsistent")].status}' False
}

message() {
  local show_k show_bin
  show_k=$(from_root "$kubeconfig") show_bin=$(from_root "$k8s")
  local cmd_fleet="bin/kubectl-nodewright fleet --kubeconfig $show_k --context hub"
  local cmd_ui="bin/kubectl-nodewright ui --fleet --kubeconfig $show_k --context hub"
  local site_b="healthy (MultiNode, Observe): no flip, as it has no storage network (it needs root)" flip_cmds=""
  if flip_wanted; then
    site_b="Managed, its agents on a played storage network: the flip to-lacp waits for the approval of Node1"
    flip_cmds="
  bin/kubectl-nodewright flip list --kubeconfig $show_k --context site-b   # the flip on the member
  bin/kubectl-nodewright approve bondflip/to-lacp --step Node1 --kubeconfig $show_k --context site-b"
  fi
  cat <<MSG

The fleet demo is up, on 127.0.0.1 only: a hub and three members (docs/demo-fleet.md).
  kubeconfig:  $kubeconfig (contexts hub, site-a, site-b, site-c: each API server's admin)
  hub:         pid $(cat "$state/hub/hub.pid"), log ${state#"$root"/}/hub/hub.log, metrics http://127.0.0.1:$(port_of hub-metrics)/metrics
  site-a:      healthy (MultiNode, Observe)
  site-b:      $site_b
  site-c:      its audit trail restarted after its witness countersigned it: checkpoint mismatch

Try (from the repository root):
  $cmd_fleet
  $cmd_ui
  export KUBECONFIG=$show_k PATH=$show_bin:\$PATH
  kubectl --context hub get nodewrightclustersummaries
  bin/kubectl-nodewright status --kubeconfig $show_k --context site-a   # a member itself
  kubectl --context hub describe nodewrightclustersummary kubeconfig.site-c   # CheckpointConsistent: why$flip_cmds

Stop it with: make demo-fleet-down
MSG
  if [ -t 1 ]; then
    echo
    $cmd_fleet
  fi
}

from_root() { case "$1" in "$root"/*) echo "\$PWD/${1#"$root"/}" ;; *) echo "$1" ;; esac; }

down() {
  local m
  stop "$state/hub/hub.pid" hub
  local n
  for n in "${flip_nodes[@]}"; do stop "$state/$flip_member/agents/$n/agent.pid" "agent of $flip_member's $n"; done
  # SIGTERM: the network removes its namespaces and links.
  stop "$state/$flip_member/net.pid" "storage network of $flip_member"
  for m in "${members[@]}"; do
    stop "$state/$m/token-controller.pid" "token controller of $m"
    stop "$state/$m/legacy-sim.pid" "legacy DaemonSet simulator of $m"
    stop "$state/$m/operator.pid" "operator of $m"
    stop "$state/$m/witness.pid" "witness of $m"
  done
  for m in hub "${members[@]}"; do stop "$state/$m/apiserver.pid" "API server of $m"; done
  stop "$state/etcd/etcd.pid" etcd
  # Anything still running from the demo's folder is a leftover: end it, and say so.
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

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
