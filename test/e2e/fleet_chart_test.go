package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The fleet hub's release on the local site: the site is its own hub and its only member.
const (
	fleetNS      = "nodewright-fleet"
	fleetAccount = "system:serviceaccount:" + fleetNS + ":nodewright-fleet"
	// hubReaderAccount is the ServiceAccount the member chart creates for the hub
	// (upgradeValues: fleet.hubReader.serviceAccount).
	hubReaderAccount = "nodewright-fleet-hub"
	// fleetSiteValues place the hub's pods on the site's nodes, which kwok plays (as
	// config/demo/chart-values.yaml does the operator's).
	fleetSiteValues = `nodeSelector:
  type: kwok
tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
    effect: NoSchedule
`
	// fleetUpgradeValues are what the hub's upgrade changes; each shows in the cluster.
	fleetUpgradeValues = `replicas: 2
logLevel: debug
health:
  interval: 10s
networkPolicy:
  egress:
    memberCIDRs: [127.0.0.1/32]
    memberPorts: [%PORT%]
`
)

// checkFleetHubChart installs the fleet hub's chart in a namespace of its own that enforces the
// restricted Pod Security level, and checks: its Deployment is accepted there and available;
// its ServiceAccount may do exactly what test/chart/testdata/reviewed-fleet-rbac.txt lists and
// not what lies next to it; the hub, run as that ServiceAccount with the arguments of the
// chart's Deployment, summarises the site through a kubeconfig Secret made as docs/fleet.md
// says from the token of the member chart's hub ServiceAccount, and is refused nothing; a
// helm upgrade with changed values shows in the objects; helm uninstall leaves the CRDs and the
// summaries alone. The member chart runs with upgradeValues' fleet.hubReader.
func (s *site) checkFleetHubChart(t *testing.T, helm string) {
	t.Helper()
	chart := filepath.Join(s.root, "charts", "nodewright-fleet")
	s.kubectlOut(t, "create", "namespace", fleetNS)
	s.kubectlOut(t, "label", "namespace", fleetNS, "pod-security.kubernetes.io/enforce=restricted")
	dir := t.TempDir()
	siteValues := filepath.Join(dir, "fleet-site-values.yaml")
	if err := os.WriteFile(siteValues, []byte(fleetSiteValues), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, helm, "install", "nodewright-fleet", chart, "-n", fleetNS, "--kubeconfig", s.kubeconfig, "-f", siteValues, "--wait", "--timeout", patience.String())
	out := s.kubectlFails(t, "run", "-n", fleetNS, "psa-check", "--image=busybox", "--restart=Never", "--dry-run=server")
	if !strings.Contains(out, `violates PodSecurity "restricted:latest"`) {
		t.Errorf("a pod with no securityContext in %s: %s; want it refused as violating restricted", fleetNS, out)
	}
	// The ReplicaSet's pod was admitted under restricted: kwok runs it.
	s.waitOutput(t, patience, "the hub's Deployment to be available", func(out string) bool { return out == "1 1" },
		"get", "deployment", "-n", fleetNS, "nodewright-fleet", "-o", "jsonpath={.spec.replicas} {.status.availableReplicas}")
	s.kubectlOut(t, "get", "crd", "nodewrightclustersummaries.fleet.nodewright.spectrocloud.com", "clusterprofiles.multicluster.x-k8s.io")

	s.checkFleetGrants(t)

	// The member's side (docs/fleet.md, registering a member): the token the API server wrote
	// into the member chart's Secret, with the cluster's CA, in a kubeconfig Secret.
	tokenSecret := hubReaderAccount + "-token"
	s.waitOutput(t, patience, "the hub reader's token Secret to be filled", func(out string) bool { return out != "" },
		"get", "secret", "-n", "nodewright-system", tokenSecret, "-o", "jsonpath={.data.token}")
	server := strings.TrimSpace(s.kubectlOut(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	s.shell(t, dir, `set -eu
kubectl -n nodewright-system get secret `+tokenSecret+` -o jsonpath='{.data.token}' | base64 -d > token
kubectl -n nodewright-system get secret `+tokenSecret+` -o jsonpath='{.data.ca\.crt}' | base64 -d > ca.crt
kubectl config --kubeconfig=site.kubeconfig set-cluster site --server="`+server+`" --certificate-authority=ca.crt --embed-certs=true
kubectl config --kubeconfig=site.kubeconfig set-credentials fleet-hub --token="$(cat token)"
kubectl config --kubeconfig=site.kubeconfig set-context site --cluster=site --user=fleet-hub
kubectl config --kubeconfig=site.kubeconfig use-context site
kubectl -n `+fleetNS+` create secret generic site --from-file=kubeconfig=site.kubeconfig
kubectl -n `+fleetNS+` label secret site sigs.k8s.io/multicluster-runtime-kubeconfig=true
`)

	// The hub, as the pods kwok plays would run it: the chart's arguments, its ServiceAccount's
	// token.
	stop := s.startFleetHub(t, dir)
	s.waitOutput(t, patience, "the site's summary to be reachable and filled", func(out string) bool {
		f := strings.Fields(out)
		return len(f) == 3 && f[0] == "True" && f[1] != "" && f[2] != ""
	}, "get", "nodewrightclustersummary", "kubeconfig.site", "-o",
		`jsonpath={.status.conditions[?(@.type=="Reachable")].status} {.status.phase} {.status.nodewrightVersion}`)
	if holder := s.kubectlOut(t, "get", "lease", "-n", fleetNS, "nodewright-fleet", "-o", "jsonpath={.spec.holderIdentity}"); holder == "" {
		t.Error("the hub's Lease nodewright-fleet has no holder")
	}
	log := stop()
	if strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("the hub, running as the chart's ServiceAccount, was refused something:\n%s", grepLines(log, "orbidden"))
	}

	// The upgrade: the values show in the Deployment, its pods and the NetworkPolicy.
	values := filepath.Join(dir, "fleet-upgrade-values.yaml")
	if err := os.WriteFile(values, []byte(strings.ReplaceAll(fleetUpgradeValues, "%PORT%", port(server))), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, helm, "upgrade", "nodewright-fleet", chart, "-n", fleetNS, "--kubeconfig", s.kubeconfig, "-f", siteValues, "-f", values, "--wait", "--timeout", patience.String())
	s.waitOutput(t, patience, "the upgraded Deployment to be available", func(out string) bool { return out == "2 2" },
		"get", "deployment", "-n", fleetNS, "nodewright-fleet", "-o", "jsonpath={.spec.replicas} {.status.availableReplicas}")
	args := s.kubectlOut(t, "get", "deployment", "-n", fleetNS, "nodewright-fleet", "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	for _, want := range []string{"--zap-log-level=debug", "--health-interval=10s", "--namespace=" + fleetNS, "--clusterprofile-namespace=" + fleetNS} {
		if !strings.Contains(args, want) {
			t.Errorf("the upgraded hub's args %s lack %s", args, want)
		}
	}
	if got := s.kubectlOut(t, "get", "networkpolicy", "-n", fleetNS, "nodewright-fleet", "-o", "jsonpath={.spec.egress[2].to[0].ipBlock.cidr} {.spec.egress[2].ports[0].port}"); got != "127.0.0.1/32 "+port(server) {
		t.Errorf("the upgraded NetworkPolicy's egress to the members: %q", got)
	}
	// The hub with the upgraded arguments writes the summary anew.
	s.kubectlOut(t, "delete", "nodewrightclustersummary", "kubeconfig.site")
	stop = s.startFleetHub(t, dir)
	s.waitOutput(t, patience, "the upgraded hub to write the summary anew", func(out string) bool { return out == "True" },
		"get", "nodewrightclustersummary", "kubeconfig.site", "-o", `jsonpath={.status.conditions[?(@.type=="Reachable")].status}`)
	if log := stop(); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("the upgraded hub was refused something:\n%s", grepLines(log, "orbidden"))
	}

	// Uninstalled, and its namespace gone: the CRDs and the summaries stay, nothing else of it.
	run(t, helm, "uninstall", "nodewright-fleet", "-n", fleetNS, "--kubeconfig", s.kubeconfig, "--wait", "--timeout", patience.String())
	s.kubectlOut(t, "delete", "namespace", fleetNS, "--wait=true", "--timeout="+patience.String())
	s.kubectlOut(t, "get", "crd", "nodewrightclustersummaries.fleet.nodewright.spectrocloud.com", "clusterprofiles.multicluster.x-k8s.io")
	s.kubectlOut(t, "get", "nodewrightclustersummary", "kubeconfig.site")
	for _, kind := range []string{"clusterrole", "clusterrolebinding"} {
		if out := s.kubectlOut(t, "get", kind, "-l", "app.kubernetes.io/name=nodewright-fleet", "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("after helm uninstall: %s", out)
		}
	}
}

// checkFleetGrants: the hub's ServiceAccount may do each grant of the reviewed list, and not
// what lies next to them.
func (s *site) checkFleetGrants(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.root, "test", "chart", "testdata", "reviewed-fleet-rbac.txt"))
	if err != nil {
		t.Fatal(err)
	}
	can := func(args ...string) bool {
		cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig, "auth", "can-i", "--as", fleetAccount}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr // warnings (a cluster-scoped resource asked with a namespace...)
		out, err := cmd.Output()
		answer := strings.TrimSpace(string(out))
		if answer != "yes" && answer != "no" {
			t.Fatalf("kubectl auth can-i %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return answer == "yes"
	}
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		lines++
		scope, group, resource, verb := f[0], f[1], f[2], f[3]
		var args []string
		if scope != "cluster" {
			args = append(args, "-n", fleetNS) // the release's and, by default, the inventory's
		}
		res, sub, _ := strings.Cut(resource, "/")
		if group != "core" {
			res += "." + group
		}
		if len(f) == 5 {
			res += "/" + f[4]
		}
		args = append(args, verb, res)
		if sub != "" {
			args = append(args, "--subresource="+sub)
		}
		if !can(args...) {
			t.Errorf("the hub's ServiceAccount may not %q, which the review lists (kubectl auth can-i %s)", sc.Text(), strings.Join(args, " "))
		}
	}
	if lines < 10 {
		t.Fatalf("the reviewed list has %d grants: nothing was checked", lines)
	}
	for _, args := range [][]string{
		{"-n", "nodewright-system", "get", "secrets"},
		{"-n", "default", "list", "secrets"},
		{"-n", fleetNS, "create", "secrets"},
		{"-n", fleetNS, "update", "secrets"},
		{"-n", fleetNS, "delete", "secrets"},
		{"update", "nodewrightclustersummaries.fleet.nodewright.spectrocloud.com"},
		{"patch", "nodewrightclustersummaries.fleet.nodewright.spectrocloud.com"},
		{"patch", "nodewrightclustersummaries.fleet.nodewright.spectrocloud.com", "--subresource=status"},
		{"-n", "default", "list", "clusterprofiles.multicluster.x-k8s.io"},
		{"-n", fleetNS, "update", "clusterprofiles.multicluster.x-k8s.io"},
		{"-n", fleetNS, "update", "leases.coordination.k8s.io/another"},
		{"-n", fleetNS, "delete", "leases.coordination.k8s.io/nodewright-fleet"},
		{"-n", "nodewright-system", "get", "leases.coordination.k8s.io/nodewright-fleet"},
		{"-n", "nodewright-system", "create", "events"},
		{"-n", fleetNS, "create", "pods"},
		{"-n", fleetNS, "create", "serviceaccounts/nodewright-fleet", "--subresource=token"},
		{"get", "nodewrightclusters.nodewright.spectrocloud.com"},
		{"list", "configmaps", "-A"},
		{"impersonate", "serviceaccounts", "-A"},
	} {
		if can(args...) {
			t.Errorf("the hub's ServiceAccount may %s, which the review does not list", strings.Join(args, " "))
		}
	}
}

// startFleetHub runs bin/nodewright-fleet as the chart's Deployment would: its arguments
// (but the probe and metrics addresses, the pods' own), the token of its ServiceAccount. The
// returned func stops it and returns its log.
func (s *site) startFleetHub(t *testing.T, dir string) func() string {
	t.Helper()
	server := strings.TrimSpace(s.kubectlOut(t, "config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	ca := strings.TrimSpace(s.kubectlOut(t, "config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.certificate-authority}"))
	token := strings.TrimSpace(s.kubectlOut(t, "create", "token", "-n", fleetNS, "nodewright-fleet", "--duration", "1h"))
	kubeconfig := filepath.Join(dir, "hub.kubeconfig")
	config := "apiVersion: v1\nkind: Config\ncurrent-context: hub\n" +
		"clusters:\n- name: site\n  cluster:\n    server: " + server + "\n    certificate-authority: " + ca + "\n" +
		"users:\n- name: nodewright-fleet\n  user:\n    token: " + token + "\n" +
		"contexts:\n- name: hub\n  context:\n    cluster: site\n    user: nodewright-fleet\n"
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range strings.Split(strings.TrimSpace(s.kubectlOut(t, "get", "deployment", "-n", fleetNS, "nodewright-fleet", "-o",
		`go-template={{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}`)), "\n") {
		if !strings.HasPrefix(a, "--health-probe-bind-address=") && !strings.HasPrefix(a, "--metrics-bind-address=") {
			args = append(args, a)
		}
	}
	args = append(args, "--kubeconfig", kubeconfig, "--health-probe-bind-address="+testenv.FreeAddr(t), "--metrics-bind-address=0")
	logPath := filepath.Join(dir, "fleet-hub.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(s.root, "bin", "nodewright-fleet"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the hub: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Errorf("the hub (pid %d) did not stop", cmd.Process.Pid)
			}
			_ = logFile.Close()
		}
		data, _ := os.ReadFile(logPath)
		return string(data)
	}
	t.Cleanup(func() {
		log := stop()
		if t.Failed() {
			t.Logf("the hub's log:\n%s", log)
		}
	})
	return stop
}

// shell runs a script in dir with the site's kubectl first on PATH and its kubeconfig, as a
// user following docs/fleet.md would.
func (s *site) shell(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(s.kubectl)+":"+os.Getenv("PATH"), "KUBECONFIG="+s.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, out)
	}
}
