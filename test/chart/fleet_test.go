package chart_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// The fleet hub's chart (charts/nodewright-fleet), checked as the member's chart is.
const (
	fleetChartDir = "charts/nodewright-fleet"
	// fleetNS and inventoryNS differ, so that a grant's scope tells which namespace it is in.
	fleetNS     = "fleet-test"
	inventoryNS = "inventory-test"
	// reviewedFleetRBAC is the reviewed list of every grant of the hub's chart.
	reviewedFleetRBAC = "test/chart/testdata/reviewed-fleet-rbac.txt"
	fleetRepo         = "ghcr.io/spectrocloud/nodewright-fleet"
)

// fleetAllOn turns every optional part of the hub's chart on.
var fleetAllOn = []string{"--set", "clusterProfileNamespace=" + inventoryNS, "--set", "allowInsecureSkipTLSVerify=true",
	"--set", `auditWitness.publicKeys.receiver\.pub=-----BEGIN PUBLIC KEY-----`, "--set", "replicas=2",
	"--set", "networkPolicy.egress.memberCIDRs={10.1.0.0/16,192.0.2.7/32}", "--set", "networkPolicy.egress.memberPorts={6443}",
	"--set", "networkPolicy.egress.apiServerCIDRs={10.0.0.10/32}", "--set", "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus"}

// renderFleet runs helm template on the hub's chart in fleetNS.
func renderFleet(t *testing.T, args ...string) []object {
	t.Helper()
	stdout, stderr, err := helm(t, append([]string{"template", "nodewright-fleet", fleetChartDir, "--namespace", fleetNS, "--kube-version", kubeVersion}, args...)...)
	if err != nil {
		t.Fatalf("helm template %s %s: %v\n%s", fleetChartDir, strings.Join(args, " "), err, stderr)
	}
	return parse(t, stdout)
}

// hubContainer is the hub's container of the rendered Deployment.
func hubContainer(t *testing.T, objs []object) (corev1.PodSpec, corev1.Container) {
	t.Helper()
	o, ok := find(objs, "Deployment", "nodewright-fleet")
	if !ok {
		t.Fatal("no Deployment nodewright-fleet")
	}
	var d appsv1.Deployment
	o.decode(t, &d)
	if len(d.Spec.Template.Spec.Containers) != 1 || d.Spec.Template.Spec.Containers[0].Name != "hub" {
		t.Fatalf("%s: want one container, hub", o)
	}
	return d.Spec.Template.Spec, d.Spec.Template.Spec.Containers[0]
}

// TestFleetLintStrict: helm lint --strict passes with the defaults and every option on.
func TestFleetLintStrict(t *testing.T) {
	for name, args := range map[string][]string{"defaults": nil, "all-on": fleetAllOn} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, err := helm(t, append([]string{"lint", "--strict", "--kube-version", kubeVersion, fleetChartDir}, args...)...)
			if err != nil {
				t.Fatalf("helm lint --strict: %v\n%s%s", err, stdout, stderr)
			}
		})
	}
}

// TestFleetSchemaRefusesBadValues: each bad value is refused, naming it.
func TestFleetSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set   string
		names string
	}{
		{"replicas=-1", "at '/replicas'"},
		{"image.digest=latest", "at '/image/digest'"},
		{"image.repository=ghcr.io/spectrocloud/nodewright-fleet:v1", "at '/image/repository'"},
		{"image.pullPolicy=Sometimes", "at '/image/pullPolicy'"},
		{"logLevel=warn", "at '/logLevel'"},
		{"clusterProfileNamespace=Inventory", "at '/clusterProfileNamespace'"},
		{"memberNamespace=", "at '/memberNamespace'"},
		{"memberNamespace=nodewright_system", "at '/memberNamespace'"},
		{"allowInsecureSkipTLSVerify=yes", "at '/allowInsecureSkipTLSVerify'"},
		{"health.interval=5", "at '/health/interval'"},
		{"health.timeout=5 s", "at '/health/timeout'"},
		{"health.failureThreshold=0", "at '/health/failureThreshold'"},
		{"auditWitness.grace=ten minutes", "at '/auditWitness/grace'"},
		{"auditWitness.publicKeys.a/b=key", "at '/auditWitness/publicKeys': additional properties 'a/b' not allowed"},
		{"metrics.port=0", "at '/metrics/port'"},
		{"networkPolicy.egress.memberCIDRs={10.0.0.0}", "at '/networkPolicy/egress/memberCIDRs/0'"},
		{"networkPolicy.egress.memberPorts={65536}", "at '/networkPolicy/egress/memberPorts/0'"},
		{"clusterProfileProviderFile=plugins.json", "additional properties 'clusterProfileProviderFile' not allowed"},
		{"unknownKey=1", "additional properties 'unknownKey' not allowed"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			_, stderr, err := helm(t, "template", "nodewright-fleet", fleetChartDir, "--namespace", fleetNS, "--kube-version", kubeVersion, "--set", tc.set)
			if err == nil {
				t.Fatalf("helm accepted --set %s", tc.set)
			}
			if !strings.Contains(stderr, "values don't meet the specifications of the schema") || !strings.Contains(stderr, tc.names) {
				t.Fatalf("helm refused --set %s, but not with a schema error naming it (%q):\n%s", tc.set, tc.names, stderr)
			}
		})
	}
	t.Run("podLabels", func(t *testing.T) {
		t.Parallel()
		_, stderr, err := helm(t, "template", "nodewright-fleet", fleetChartDir, "--namespace", fleetNS, "--kube-version", kubeVersion,
			"--set", `podLabels.app\.kubernetes\.io/component=x`)
		if err == nil || !strings.Contains(stderr, "podLabels: app.kubernetes.io/component is the chart's own selector label") {
			t.Fatalf("a selector label in podLabels: %v\n%s", err, stderr)
		}
	})
}

// TestFleetSchemaAcceptsGoodValues: custom values of every kind render.
func TestFleetSchemaAcceptsGoodValues(t *testing.T) {
	for _, set := range [][]string{
		{"replicas=0"},
		{"image.digest=sha256:" + strings.Repeat("0123456789abcdef", 4)},
		{"image.repository=localhost:5000/nodewright-fleet", "image.tag=v0.2.0-rc.1"},
		{"health.interval=1m30s", "health.timeout=500ms", "health.failureThreshold=5", "auditWitness.grace=1h"},
		{"metrics.enabled=false", "networkPolicy.enabled=false"},
		{"clusterProfileNamespace=fleet-inventory", "memberNamespace=nodewright"},
	} {
		t.Run(strings.Join(set, ","), func(t *testing.T) {
			t.Parallel()
			var args []string
			for _, s := range set {
				args = append(args, "--set", s)
			}
			renderFleet(t, args...)
		})
	}
}

// TestFleetSchemaDescribesValues: as TestSchemaDescribesValues, for the hub's chart.
func TestFleetSchemaDescribesValues(t *testing.T) {
	checkSchemaDescribesValues(t, fleetChartDir, map[string]bool{
		"resources": true, "nodeSelector": true, "affinity": true, "podAnnotations": true, "podLabels": true, "auditWitness.publicKeys": true,
	})
}

// TestFleetPodSecurityRestricted: the hub's pod meets the restricted Pod Security level (and
// the chart's stricter checks), with the defaults and every option on, and is the only pod.
func TestFleetPodSecurityRestricted(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{"defaults": nil, "all-on": fleetAllOn} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objs := renderFleet(t, args...)
			ps := pods(t, objs)
			if len(ps) != 1 || ps[0].owner.Kind != "Deployment" || ps[0].owner.Metadata.Namespace != fleetNS {
				t.Fatalf("pods rendered: %v; want the hub's Deployment in %s alone", ps, fleetNS)
			}
			checkRestricted(t, evaluator, ps[0])
			for _, o := range objs {
				if o.Kind == "Namespace" {
					t.Errorf("%s: the chart makes no namespace (docs/fleet.md: create it labelled restricted)", o)
				}
			}
			spec, _ := hubContainer(t, objs)
			if spec.ServiceAccountName != "nodewright-fleet" {
				t.Errorf("the hub runs as ServiceAccount %q, want nodewright-fleet", spec.ServiceAccountName)
			}
		})
	}
}

// TestFleetRBACReviewed: every grant of the hub's chart is in testdata/reviewed-fleet-rbac.txt
// and every line there is still granted; no wildcard; Secrets read only, and only in the
// hub's namespace; ClusterProfiles read only, in the inventory's; writes only on the summaries,
// the hub's Lease and Events; bindings only of the chart's roles, only to its ServiceAccount.
func TestFleetRBACReviewed(t *testing.T) {
	root, _ := tools(t)
	objs := renderFleet(t, "--set", "clusterProfileNamespace="+inventoryNS)
	scopes := map[string]string{fleetNS: "namespace:release", inventoryNS: "namespace:inventory"}
	reads := map[string]bool{"get": true, "list": true, "watch": true}
	// What the hub may write, by API group and resource.
	writes := map[string]bool{"fleet.nodewright.spectrocloud.com nodewrightclustersummaries": true,
		"fleet.nodewright.spectrocloud.com nodewrightclustersummaries/status": true, "coordination.k8s.io leases": true, "core events": true}
	granted := map[string]bool{}
	rs, roles := rolesOf(t, objs, scopes)
	for _, r := range rs {
		o, scope := r.obj, r.scope
		for _, rule := range r.rules {
			for _, line := range grantLines(scope, rule) {
				granted[line] = true
				f := strings.Fields(line)
				if f[1] == "core" && f[2] == "secrets" && (scope != "namespace:release" || !reads[f[3]]) {
					t.Errorf("%s: %q: Secrets may be read (get, list, watch) in the hub's namespace only", o, line)
				}
				if f[2] == "clusterprofiles" && (scope != "namespace:inventory" || !reads[f[3]]) {
					t.Errorf("%s: %q: ClusterProfiles may be read in the inventory's namespace only", o, line)
				}
				if !reads[f[3]] && !writes[f[1]+" "+f[2]] {
					t.Errorf("%s: %q: the hub writes only its summaries, its Lease and Events", o, line)
				}
			}
		}
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "nodewright-fleet", Namespace: fleetNS}}
	for _, o := range objs {
		_, subjects, ok := bindingOf(t, o, roles)
		if !ok {
			continue
		}
		if !reflect.DeepEqual(subjects, want) {
			t.Errorf("%s binds %+v; want the hub's ServiceAccount alone, %+v", o, subjects, want)
		}
	}
	compareReviewed(t, root, reviewedFleetRBAC, granted)
}

// TestFleetDeploymentArgs: the hub's flags follow the values (its namespace the release's, the
// inventory the release's by default), and each is a flag cmd/nodewright-fleet defines.
func TestFleetDeploymentArgs(t *testing.T) {
	root, _ := tools(t)
	main, err := os.ReadFile(filepath.Join(root, "cmd", "nodewright-fleet", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"defaults", nil, []string{"--namespace=" + fleetNS, "--clusterprofile-namespace=" + fleetNS, "--member-namespace=nodewright-system",
			"--health-interval=5s", "--health-timeout=5s", "--health-failure-threshold=2", "--health-ready-interval=1m", "--health-poll-interval=1m", "--leader-elect=true",
			"--health-probe-bind-address=:8081", "--metrics-bind-address=:8080", "--zap-log-level=info", "--audit-witness-grace=10m"}},
		{"all-on", append([]string{"--set", "metrics.enabled=false", "--set", "memberNamespace=nw", "--set", "health.interval=1m"}, fleetAllOn...),
			[]string{"--namespace=" + fleetNS, "--clusterprofile-namespace=" + inventoryNS, "--member-namespace=nw",
				"--health-interval=1m", "--health-timeout=5s", "--health-failure-threshold=2", "--health-ready-interval=1m", "--health-poll-interval=1m", "--leader-elect=true",
				"--health-probe-bind-address=:8081", "--metrics-bind-address=0", "--zap-log-level=info", "--allow-insecure-skip-tls-verify",
				"--audit-witness-public-key=/etc/nodewright-fleet/witness-keys/receiver.pub", "--audit-witness-grace=10m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := renderFleet(t, tc.args...)
			spec, c := hubContainer(t, objs)
			if !reflect.DeepEqual(c.Args, tc.want) {
				t.Errorf("the hub's args:\n  %v\nwant\n  %v", c.Args, tc.want)
			}
			for _, a := range c.Args {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if name != "zap-log-level" && !bytes.Contains(main, []byte(`"`+name+`"`)) && !strings.Contains(a, "insecure") {
					t.Errorf("%s: cmd/nodewright-fleet defines no flag %q", a, name)
				}
			}
			if len(c.Command) > 0 {
				t.Errorf("the container's command %v: the image's entrypoint is the hub", c.Command)
			}
			_, keys := find(objs, "ConfigMap", "nodewright-fleet-witness-keys")
			if mounted := len(spec.Volumes) == 2; keys != (tc.name == "all-on") || mounted != keys {
				t.Errorf("witness keys: ConfigMap rendered %v, volumes %v", keys, spec.Volumes)
			}
		})
	}
}

// TestFleetGoMaxProcs: the hub runs with GOMAXPROCS goMaxProcs (1 by default, as benchmarked);
// 0 leaves the Go runtime's default, and no environment.
func TestFleetGoMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want []corev1.EnvVar
	}{
		{"", []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "1"}}},
		{"goMaxProcs=4", []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "4"}}},
		{"goMaxProcs=0", nil},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			var args []string
			if tc.set != "" {
				args = []string{"--set", tc.set}
			}
			if _, c := hubContainer(t, renderFleet(t, args...)); !reflect.DeepEqual(c.Env, tc.want) {
				t.Errorf("the hub's environment %v; want %v", c.Env, tc.want)
			}
		})
	}
}

// TestFleetNetworkPolicy: the hub's pods admit only the metrics scrape (from metricsFrom) and
// the probes, and reach only the API server, DNS and the members' API servers (memberCIDRs on
// memberPorts).
func TestFleetNetworkPolicy(t *testing.T) {
	o, ok := find(renderFleet(t, fleetAllOn...), "NetworkPolicy", "nodewright-fleet")
	if !ok {
		t.Fatal("no NetworkPolicy nodewright-fleet")
	}
	var np networkingv1.NetworkPolicy
	o.decode(t, &np)
	type rule struct {
		ports []networkingv1.NetworkPolicyPort
		peers []networkingv1.NetworkPolicyPeer
	}
	var ingress, egress []rule
	for _, r := range np.Spec.Ingress {
		ingress = append(ingress, rule{r.Ports, r.From})
	}
	for _, r := range np.Spec.Egress {
		egress = append(egress, rule{r.Ports, r.To})
	}
	ports := func(r rule) []string {
		var out []string
		for _, p := range r.ports {
			out = append(out, p.Port.String())
		}
		sort.Strings(out)
		return out
	}
	cidrs := func(r rule) []string {
		var out []string
		for _, p := range r.peers {
			if p.IPBlock != nil {
				out = append(out, p.IPBlock.CIDR)
			}
		}
		return out
	}
	if len(ingress) != 2 || !reflect.DeepEqual(ports(ingress[0]), []string{"metrics"}) || len(ingress[0].peers) != 1 ||
		!reflect.DeepEqual(ports(ingress[1]), []string{"probes"}) || len(ingress[1].peers) != 0 {
		t.Errorf("ingress %+v; want metrics from metricsFrom, and the probes", np.Spec.Ingress)
	}
	if len(egress) != 3 {
		t.Fatalf("egress %+v; want the API server, DNS and the members", np.Spec.Egress)
	}
	if !reflect.DeepEqual(cidrs(egress[0]), []string{"10.0.0.10/32"}) {
		t.Errorf("egress to the API server: %v", cidrs(egress[0]))
	}
	if !reflect.DeepEqual(ports(egress[1]), []string{"53", "53"}) || len(egress[1].peers) != 1 {
		t.Errorf("egress to DNS: %+v", np.Spec.Egress[1])
	}
	if !reflect.DeepEqual(ports(egress[2]), []string{"6443"}) || !reflect.DeepEqual(cidrs(egress[2]), []string{"10.1.0.0/16", "192.0.2.7/32"}) {
		t.Errorf("egress to the members: ports %v to %v; want 6443 to 10.1.0.0/16 and 192.0.2.7/32", ports(egress[2]), cidrs(egress[2]))
	}
	if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{"Ingress", "Egress"}) {
		t.Errorf("policyTypes %v", np.Spec.PolicyTypes)
	}
}

// TestFleetImages: the hub's image is tagged v<appVersion> by default, and referenced by digest
// with the digests `make images` writes for it (bin/images/fleet-digests.yaml).
func TestFleetImages(t *testing.T) {
	root, _ := tools(t)
	chartYAML, err := os.ReadFile(filepath.Join(root, fleetChartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: no appVersion (%v)", err)
	}
	if _, c := hubContainer(t, renderFleet(t)); c.Image != fleetRepo+":v"+chart.AppVersion {
		t.Errorf("default image %q, want %s:v%s", c.Image, fleetRepo, chart.AppVersion)
	}
	digest := "sha256:" + strings.Repeat("3d", 32)
	file := filepath.Join(t.TempDir(), "fleet-digests.yaml")
	if err := os.WriteFile(file, []byte("# Written by `make images` (hack/images)\nimage:\n  digest: "+digest+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, c := hubContainer(t, renderFleet(t, "-f", file, "--set", "image.tag=v9.9.9")); c.Image != fleetRepo+"@"+digest {
		t.Errorf("image with fleet-digests.yaml %q, want %s@%s", c.Image, fleetRepo, digest)
	}
	path := filepath.Join(root, "bin", "images", "fleet-digests.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no bin/images/fleet-digests.yaml: make images has not run")
	}
	if _, c := hubContainer(t, renderFleet(t, "-f", path)); !regexp.MustCompile(`^` + regexp.QuoteMeta(fleetRepo) + `@sha256:[0-9a-f]{64}$`).MatchString(c.Image) {
		t.Errorf("image with bin/images/fleet-digests.yaml %q", c.Image)
	}
}

// TestFleetCRDs: the hub chart's crds/ holds config/crd/fleet's CRDs and the ClusterProfile CRD
// under their generated header lines, no template renders a CRD, and nothing is kept on
// uninstall but the CRDs.
func TestFleetCRDs(t *testing.T) {
	root, _ := tools(t)
	for _, o := range renderFleet(t, fleetAllOn...) {
		if o.Kind == "CustomResourceDefinition" {
			t.Errorf("%s: CRDs belong in crds/", o)
		}
		if p := o.Metadata.Annotations["helm.sh/resource-policy"]; p != "" {
			t.Errorf("%s: helm.sh/resource-policy %s", o, p)
		}
	}
	fleet, err := filepath.Glob(filepath.Join(root, "config", "crd", "fleet", "*.yaml"))
	if err != nil || len(fleet) == 0 {
		t.Fatalf("no CRDs in config/crd/fleet: %v", err)
	}
	inChart, err := filepath.Glob(filepath.Join(root, fleetChartDir, "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range inChart {
		names = append(names, filepath.Base(p))
	}
	want := []string{filepath.Base(fleet[0]), "multicluster.x-k8s.io_clusterprofiles.yaml"}
	if len(fleet) != 1 || !reflect.DeepEqual(names, want) {
		t.Fatalf("crds/ holds %v, want %v (run make generate)", names, want)
	}
	wantData, err := os.ReadFile(fleet[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(inChart[0])
	if err != nil {
		t.Fatal(err)
	}
	header, rest, _ := bytes.Cut(got, []byte("\n"))
	if !bytes.HasPrefix(header, []byte("# Generated from config/crd/fleet/")) || !bytes.Equal(rest, wantData) {
		t.Errorf("crds/%s is not config/crd/fleet/%[1]s under its generated header line (run make generate)", names[0])
	}
	profile, err := os.ReadFile(inChart[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(profile, []byte("# Generated from sigs.k8s.io/cluster-inventory-api@")) || !bytes.Contains(profile, []byte("name: clusterprofiles.multicluster.x-k8s.io")) {
		t.Errorf("crds/%s is not the ClusterProfile CRD of the pinned module (run make generate)", names[1])
	}
}
