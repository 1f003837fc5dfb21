package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// previousChart is the chart version an upgrade starts from: the chart as first committed,
// packaged. When a chart version is released, its package replaces this one.
const previousChart = "testdata/nodewright-0.1.0-alpha.1.tgz"

// upgradeValues are custom values the upgrade applies over the local site's: each one shows
// in the cluster afterwards.
const upgradeValues = `replicas: 1
logLevel: debug
podAnnotations:
  nodewright.spectrocloud.com/upgraded: "yes"
cluster:
  heartbeatStaleAfter: 45s
metrics:
  serviceMonitor:
    enabled: true
    labels:
      release: site-prometheus
networkPolicy:
  metricsFrom:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: monitoring
fleet:
  hubReader:
    enabled: true
    serviceAccount:
      name: nodewright-fleet-hub
      create: true
`

// TestChartLifecycle installs the previous chart version on a local site, keeps Nodewright
// objects through an upgrade to this tree's chart with custom values, checks the chart's
// default rendering against the site's API server, installs, upgrades and uninstalls the fleet
// hub's chart on the same site (checkFleetHubChart), and uninstalls it: what is left is exactly
// what docs/install.md says is kept.
func TestChartLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole local cluster")
	}
	s := newSite(t)
	prev, err := filepath.Abs(previousChart)
	if err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "upgrade-values.yaml")
	if err := os.WriteFile(values, []byte(upgradeValues), 0o644); err != nil {
		t.Fatal(err)
	}
	base := s.env
	s.env = append(slices.Clone(base), "NODEWRIGHT_DEMO_CHART="+prev)
	// Down even when up fails part way: what it started would run on.
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs(t)
		}
		s.run(t, "down")
	})
	s.run(t, "up")
	helm := helmBinary(t, s.root)
	if got := s.helmChart(t, helm); got != "nodewright-0.1.0-alpha.1" {
		t.Fatalf("the site runs chart %s, want the previous version", got)
	}

	// Objects of every kind the site makes, which the upgrade must keep.
	s.kubectlOut(t, "apply", "-n", "demo", "-f", filepath.Join(s.root, "config", "samples", "nodewright_v1alpha1_vmvolumemigration.yaml"))
	s.waitOutput(t, patience, "the migration to succeed", func(out string) bool { return out == "Succeeded" },
		"get", "vmvm", "-n", "demo", "database-rootdisk", "-o", "jsonpath={.status.phase}")
	s.waitOutput(t, patience, "an agent status per node", func(out string) bool { return len(strings.Fields(out)) == 3 },
		"get", "nodewrightagentstatus", "-o", "jsonpath={.items[*].metadata.name}")
	// NodewrightAgentStatuses come and go with the legacy node list, which the simulator's
	// loop changes (a peer is lost and rejoins); the other objects must keep their uids.
	before := s.nodewrightObjects(t)
	maps.DeleteFunc(before, func(key, _ string) bool { return strings.HasPrefix(key, "NodewrightAgentStatus/") })

	// The operator's namespace enforces the restricted Pod Security level, so the operator's
	// pods running there passed it.
	out := s.kubectlFails(t, "run", "-n", "nodewright-system", "psa-check", "--image=busybox", "--restart=Never", "--dry-run=server")
	if !strings.Contains(out, `violates PodSecurity "restricted:latest"`) {
		t.Errorf("a pod with no securityContext in nodewright-system: %s; want it refused as violating restricted", out)
	}
	s.waitOutput(t, patience, "the operator's pods to run in nodewright-system", func(out string) bool { return out == "Running Running" },
		"get", "pods", "-n", "nodewright-system", "-l", "app.kubernetes.io/component=operator", "-o", "jsonpath={.items[*].status.phase}")

	// The chart with its default values, and with the custom ones, against the real API
	// server: a server-side dry run of every object, admission included. In a namespace of
	// its own, so that the namespaced objects are new (merged into the release's, a Service
	// with another port would have two ports named webhook).
	s.kubectlOut(t, "create", "namespace", "nodewright-dryrun")
	s.kubectlOut(t, "label", "namespace", "nodewright-dryrun", "pod-security.kubernetes.io/enforce=restricted")
	// The agent's namespace, which the chart makes, exists first: a dry run creates nothing,
	// so the objects in it would find no namespace.
	s.kubectlOut(t, "create", "namespace", "nodewright-dryrun-agent")
	for _, extra := range [][]string{nil, {"-f", filepath.Join(s.root, "config", "demo", "chart-values.yaml"), "-f", values,
		"--set-file", `profile.trustedKeys.demo\.pub=` + filepath.Join(s.dir, "profile.pub")}} {
		args := append([]string{"template", "nodewright", filepath.Join(s.root, "charts", "nodewright"),
			"-n", "nodewright-dryrun", "--kube-version", "1.34.2", "--set", "agent.namespace=nodewright-dryrun-agent"}, extra...)
		rendered := run(t, helm, args...)
		apply := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "apply", "--server-side", "--force-conflicts",
			"--dry-run=server", "--field-manager", "chart-test", "-f", "-")
		apply.Stdin = strings.NewReader(rendered)
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("server-side dry run of the chart with values %v: %v\n%s", extra, err, out)
		}
	}

	// The upgrade: new CRDs applied, the release upgraded with custom values, the operator
	// restarted with the new Deployment's arguments.
	s.env = append(slices.Clone(base), "NODEWRIGHT_DEMO_VALUES="+values)
	caBefore := s.kubectlOut(t, "get", "secret", "-n", "nodewright-system", "nodewright-webhook-cert", "-o", `jsonpath={.data.ca\.crt}`)
	s.run(t, "upgrade")
	// Helm's manifest of the Secret has no data, so the upgrade keeps the operator's CA.
	if caBefore == "" || s.kubectlOut(t, "get", "secret", "-n", "nodewright-system", "nodewright-webhook-cert", "-o", `jsonpath={.data.ca\.crt}`) != caBefore {
		t.Errorf("the webhook CA changed in the upgrade (before: %d bytes)", len(caBefore))
	}
	if got := s.helmChart(t, helm); got != "nodewright-"+chartVersion(t, s.root) {
		t.Errorf("after the upgrade the site runs chart %s", got)
	}
	after := s.nodewrightObjects(t)
	for key, uid := range before {
		if after[key] != uid {
			t.Errorf("%s: uid %s before the upgrade, %q after", key, uid, after[key])
		}
	}
	s.waitOutput(t, patience, "the Deployment to have the upgrade's values and be available",
		func(out string) bool { return out == "1 1 yes" }, "get", "deployment", "-n", "nodewright-system", "nodewright-operator", "-o",
		`jsonpath={.spec.replicas} {.status.availableReplicas} {.spec.template.metadata.annotations.nodewright\.spectrocloud\.com/upgraded}`)
	if got := s.kubectlOut(t, "get", "servicemonitor", "-n", "nodewright-system", "nodewright-operator", "-o", "jsonpath={.metadata.labels.release}"); got != "site-prometheus" {
		t.Errorf("the ServiceMonitor the upgrade's values ask for has release label %q", got)
	}
	s.waitOutput(t, patience, "the operator to apply the upgraded cluster values", func(out string) bool { return out == "45s" },
		"get", "nodewrightcluster", "nodewright", "-o", "jsonpath={.spec.heartbeatStaleAfter}")
	out = s.kubectlFails(t, "apply", "-f", filepath.Join(s.root, "config", "samples", "nodewright_v1alpha1_edgeprofile.yaml"))
	if !strings.Contains(out, "denied the request: signature: the profile is not signed") {
		t.Errorf("after the upgrade, an unsigned profile: %s; want the webhook's refusal", out)
	}
	// The log holds both runs, before and after the upgrade (the migration ran in the first).
	log, err := os.ReadFile(filepath.Join(s.dir, "operator.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(string(log)), "forbidden") {
		t.Errorf("the operator, running as the chart's ServiceAccount, was refused something:\n%s", grepLines(string(log), "orbidden"))
	}

	// The upgrade turned the agent on (the previous chart had it off): its DaemonSet, and the
	// site's agents, one per node, renewing their Leases.
	s.expectAgentsRenew(t)

	// The fleet hub's chart, on this site as its hub, the site its member through the upgrade's
	// fleet.hubReader: installed, upgraded and uninstalled (fleet_chart_test.go).
	s.checkFleetHubChart(t, helm)

	// Uninstall, the operator and the agents stopped as their pods would be: only what
	// docs/install.md says is kept remains.
	s.run(t, "stop-operator")
	s.run(t, "stop-agents")
	run(t, helm, "uninstall", "nodewright", "-n", "nodewright-system", "--kubeconfig", s.kubeconfig, "--wait", "--timeout", patience.String())
	var left []string
	deadline := time.Now().Add(patience)
	for {
		left = s.releaseLeftovers(t)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(left) > 0 {
		t.Errorf("after helm uninstall these are left, and docs/install.md does not say they are kept:\n%s", strings.Join(left, "\n"))
	}
	kept := s.nodewrightObjects(t)
	for key := range before {
		if _, ok := kept[key]; !ok {
			t.Errorf("%s was removed by the uninstall; Nodewright objects are kept", key)
		}
	}
	for _, crd := range []string{"nodewrightclusters", "vmvolumemigrations", "edgeprofiles"} {
		s.kubectlOut(t, "get", "crd", crd+".nodewright.spectrocloud.com")
	}
}

// helmBinary is the helm make test builds.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("NODEWRIGHT_HELM"); p != "" {
		return p
	}
	version, err := testenv.PinnedVersion(root, "HELM_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", "tools", "helm-"+version)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm is not built at %s: run 'make test', which builds it", p)
	}
	return p
}

// chartVersion is the version in charts/nodewright/Chart.yaml.
func chartVersion(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "charts", "nodewright", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("Chart.yaml has no version")
	return ""
}

// helmChart is the chart (name-version) of the site's release.
func (s *site) helmChart(t *testing.T, helm string) string {
	t.Helper()
	var releases []struct {
		Chart string `json:"chart"`
	}
	out := run(t, helm, "list", "-n", "nodewright-system", "--kubeconfig", s.kubeconfig, "-o", "json")
	if err := json.Unmarshal([]byte(out), &releases); err != nil || len(releases) != 1 {
		t.Fatalf("helm list: %v\n%s", err, out)
	}
	return releases[0].Chart
}

// nodewrightObjects maps every object of the Nodewright kinds (kind/namespace/name) to its
// uid.
func (s *site) nodewrightObjects(t *testing.T) map[string]string {
	t.Helper()
	var list struct {
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace, Name, UID string
			} `json:"metadata"`
		} `json:"items"`
	}
	out := s.kubectlOut(t, "get", "nodewright", "-A", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get nodewright: %v", err)
	}
	objs := map[string]string{}
	for _, o := range list.Items {
		objs[fmt.Sprintf("%s/%s/%s", o.Kind, o.Metadata.Namespace, o.Metadata.Name)] = o.Metadata.UID
	}
	if len(objs) < 3 {
		t.Fatalf("want the site's Nodewright objects (cluster, profile, migration...), got %v", objs)
	}
	return objs
}

// keptOnPurpose are the objects docs/install.md says an uninstall keeps, besides the CRDs and
// the Nodewright objects: written by the operator, not the chart.
var keptOnPurpose = map[string]string{
	"ConfigMap/nodewright-system/nodewright-profile-floor":    "the highest profile version applied: a reinstall cannot downgrade",
	"ConfigMap/nodewright-system/nodewright-audit-checkpoint": "the audit trail's newest signed checkpoint",
}

// releaseLeftovers lists the objects of every listable kind that belong to Nodewright (by
// the chart's labels or a nodewright name) and are neither Nodewright objects, CRDs, nor
// kept on purpose. Events are history, not objects a release owns.
func (s *site) releaseLeftovers(t *testing.T) []string {
	t.Helper()
	kinds := strings.Fields(run(t, s.kubectl, "--kubeconfig", s.kubeconfig, "api-resources", "--verbs=list", "-o", "name"))
	var left []string
	for _, kind := range kinds {
		if kind == "events" || kind == "events.events.k8s.io" || strings.HasSuffix(kind, ".nodewright.spectrocloud.com") ||
			kind == "customresourcedefinitions.apiextensions.k8s.io" {
			continue
		}
		var list struct {
			Items []struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Namespace, Name     string
					Labels, Annotations map[string]string
				} `json:"metadata"`
			} `json:"items"`
		}
		// Standard output only: kubectl warns about deprecated kinds on standard error.
		out := run(t, s.kubectl, "--kubeconfig", s.kubeconfig, "get", kind, "-A", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("kubectl get %s: %v", kind, err)
		}
		for _, o := range list.Items {
			m := o.Metadata
			ours := m.Labels["app.kubernetes.io/part-of"] == "nodewright" || m.Labels["app.kubernetes.io/instance"] == "nodewright" ||
				m.Annotations["meta.helm.sh/release-name"] == "nodewright" ||
				strings.HasPrefix(m.Name, "nodewright") || m.Namespace == "nodewright-system"
			key := fmt.Sprintf("%s/%s/%s", o.Kind, m.Namespace, m.Name)
			if kind == "namespaces" && (m.Name == "nodewright-system" || m.Name == "nodewright-dryrun" || m.Name == "nodewright-dryrun-agent") {
				continue // the user's namespaces: made before the install, by the site and this test
			}
			if _, kept := keptOnPurpose[key]; ours && !kept {
				left = append(left, key)
			}
		}
	}
	// Every namespace has these two; they are the API server's, not the release's.
	return slices.DeleteFunc(left, func(k string) bool {
		return k == "ConfigMap/nodewright-system/kube-root-ca.crt" || k == "ServiceAccount/nodewright-system/default"
	})
}

// run runs a command and returns its standard output; it fails the test with its output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// grepLines is the lines of text that contain sub.
func grepLines(text, sub string) string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
