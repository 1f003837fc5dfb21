// Package chart_test checks the Helm chart (charts/nodewright) without a cluster: it runs helm
// lint and helm template and reads what they print. It checks that the values schema refuses bad
// values naming them, that every pod outside the agent's namespace meets the restricted Pod
// Security level, that the agent's namespace is the only privileged one and its host mounts are
// justified, how images are referenced, that the RBAC the chart grants is exactly the reviewed
// list (testdata/reviewed-rbac.txt) and the markers' role, that the operator's admission
// policies follow the values, and what an uninstall leaves behind.
//
// helm is $NODEWRIGHT_HELM, which `make test` sets after building it, or else
// bin/tools/helm-<HELM_VERSION> (hack/helm.sh builds it).
package chart_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

const (
	// kubeVersion is what helm renders for: its default is older than the chart's kubeVersion.
	kubeVersion = "1.34.2"
	// releaseNS and legacyNS differ, so that a grant's scope tells which namespace it is in.
	releaseNS = "nw-test"
	legacyNS  = "legacy-test"
	// agentNS is the agent's namespace in testdata/all-on-values.yaml (and the default).
	agentNS = "nodewright-agent"
	// allOn turns every optional part of the chart on.
	allOn = "test/chart/testdata/all-on-values.yaml"
	// reviewedRBAC is the reviewed list of every grant.
	reviewedRBAC = "test/chart/testdata/reviewed-rbac.txt"
	chartDir     = "charts/nodewright"
)

var (
	toolOnce sync.Once
	repoRoot string
	helmBin  string
	toolErr  error
)

// tools returns the repository's root and the helm binary, or fails the test saying how to build
// helm. A missing helm fails the tests rather than skipping them: an unchecked chart is worse
// than a failing test.
func tools(t *testing.T) (root, helm string) {
	t.Helper()
	toolOnce.Do(func() {
		repoRoot, toolErr = testenv.RepoRoot()
		if toolErr != nil {
			return
		}
		if path := os.Getenv("NODEWRIGHT_HELM"); path != "" {
			if _, err := os.Stat(path); err != nil {
				toolErr = fmt.Errorf("NODEWRIGHT_HELM=%s: %w; run 'make test', which builds helm, or hack/helm.sh", path, err)
				return
			}
			helmBin = path
			return
		}
		version, err := testenv.PinnedVersion(repoRoot, "HELM_VERSION")
		if err != nil {
			toolErr = err
			return
		}
		helmBin = filepath.Join(repoRoot, "bin", "tools", "helm-"+version)
		if _, err := os.Stat(helmBin); err != nil {
			toolErr = fmt.Errorf("helm %s not found at %s (and NODEWRIGHT_HELM is not set): run 'make test', which builds it, or hack/helm.sh", version, helmBin)
		}
	})
	if toolErr != nil {
		t.Fatal(toolErr)
	}
	return repoRoot, helmBin
}

// helm runs helm from the repository's root with its own empty configuration.
func helm(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root, bin := tools(t)
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// object is one rendered manifest.
type object struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	// Source is the template it came from; Doc is its YAML.
	Source string `json:"-"`
	Doc    []byte `json:"-"`
}

func (o object) String() string {
	if o.Metadata.Namespace == "" {
		return fmt.Sprintf("%s/%s (%s)", o.Kind, o.Metadata.Name, o.Source)
	}
	return fmt.Sprintf("%s %s/%s (%s)", o.Kind, o.Metadata.Namespace, o.Metadata.Name, o.Source)
}

// decode decodes the object into a typed one, refusing unknown fields: the chart must render
// only fields the API knows.
func (o object) decode(t *testing.T, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.Doc, into); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

// render runs helm template in the release namespace and returns the objects, failing the
// test when helm fails.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	stdout, stderr, err := helm(t, append([]string{"template", "nodewright", chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion}, args...)...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return parse(t, stdout)
}

// parse splits a multi-document YAML stream into objects, skipping documents that are only
// comments.
func parse(t *testing.T, stream string) []object {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var objs []object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("reading the rendered manifests: %v", err)
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("rendered manifest: %v\n%s", err, doc)
		}
		if o.Kind == "" {
			if strings.TrimSpace(uncommented(string(doc))) != "" {
				t.Fatalf("a rendered document without a kind:\n%s", doc)
			}
			continue
		}
		if m := sourceLine.FindStringSubmatch(string(doc)); m != nil {
			o.Source = m[1]
		}
		o.Doc = doc
		objs = append(objs, o)
	}
}

// sourceLine is how helm template names the template a document came from.
var sourceLine = regexp.MustCompile(`(?m)^# Source: (\S+)`)

// uncommented is doc without its comments, blank lines and document separators.
func uncommented(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") && s != "---" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// find returns the object of that kind and name.
func find(objs []object, kind, name string) (object, bool) {
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o, true
		}
	}
	return object{}, false
}

// variants are the renders the manifest checks run on: the defaults, every optional part on,
// and the agent off.
var variants = []struct {
	name  string
	args  []string
	agent bool // the agent's DaemonSet is rendered
}{
	{"defaults", nil, true},
	{"all-on", []string{"-f", allOn}, true},
	// cert-manager with the chart's own self-signed CA (all-on names an issuer).
	{"cert-manager-self-signed", []string{"--set", "webhook.certMode=cert-manager", "--set", "audit.enabled=true", "--set", "replicas=1", "--set", "audit.keySecret=audit-key"}, true},
	{"agent-off", []string{"--set", "agent.enabled=false"}, false},
}

// TestLintStrict: helm lint --strict passes with the default values, the local site's and
// every optional part on.
func TestLintStrict(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"local-site", []string{"-f", chartDir + "/../../config/demo/chart-values.yaml"}},
		{"all-on", []string{"-f", allOn}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, err := helm(t, append([]string{"lint", "--strict", "--kube-version", kubeVersion, chartDir}, tc.args...)...)
			if err != nil {
				t.Fatalf("helm lint --strict: %v\n%s%s", err, stdout, stderr)
			}
		})
	}
	// helm lint only logs a template's fail(): render the local site's values as hack/demo.sh
	// installs them (it adds the demo's profile key and the webhook port).
	t.Run("local-site-as-installed", func(t *testing.T) {
		t.Parallel()
		render(t, "-f", chartDir+"/../../config/demo/chart-values.yaml", "--set", "webhook.port=19443", "--set", "webhook.service.port=19443",
			"--set", `profile.trustedKeys.demo\.pub=-----BEGIN PUBLIC KEY-----`)
	})
}

// TestSchemaRefusesBadValues: each bad value is refused by values.schema.json (or, for values
// that only conflict with others, by the chart's checks), and the message names it.
func TestSchemaRefusesBadValues(t *testing.T) {
	const schemaError = "values don't meet the specifications of the schema"
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		set   []string
		names string // what helm's message must contain: the value's path
	}{
		{[]string{"replicas=-1"}, "at '/replicas'"},
		{[]string{"replicas=two"}, "at '/replicas'"},
		{[]string{"webhook.certMode=foo"}, "at '/webhook/certMode'"},
		{[]string{"image.digest=latest"}, "at '/image/digest'"},
		{[]string{"image.digest=" + strings.TrimPrefix(digest, "sha256:")}, "at '/image/digest'"},
		{[]string{"copyImage.digest=sha256:abc"}, "at '/copyImage/digest'"},
		{[]string{"agent.image.digest=sha256:" + strings.ToUpper(strings.TrimPrefix(digest, "sha256:"))}, "at '/agent/image/digest'"},
		{[]string{"image.tag=-v1"}, "at '/image/tag'"},
		{[]string{"image.repository="}, "at '/image/repository'"},
		{[]string{"image.repository=ghcr.io/spectrocloud/nodewright-operator:v1"}, "at '/image/repository'"},
		{[]string{"image.pullPolicy=Sometimes"}, "at '/image/pullPolicy'"},
		{[]string{"legacy.namespace=Bad_NS"}, "at '/legacy/namespace'"},
		{[]string{"legacy.namespace="}, "at '/legacy/namespace'"},
		{[]string{"legacy.configMapName="}, "at '/legacy/configMapName'"},
		{[]string{"legacy.daemonSetName=node_init"}, "at '/legacy/daemonSetName'"},
		{[]string{"legacy.eventComponent="}, "at '/legacy/eventComponent'"},
		{[]string{"agent.namespace=Agent"}, "at '/agent/namespace'"},
		{[]string{"agent.hostOS=Ubuntu"}, "at '/agent/hostOS'"},
		{[]string{"agent.terminationGracePeriodSeconds=0"}, "at '/agent/terminationGracePeriodSeconds'"},
		{[]string{"agent.nodeSelector.disk=1"}, "at '/agent/nodeSelector/disk'"},
		{[]string{"agent.drbd.enabled=maybe"}, "at '/agent/drbd/enabled'"},
		{[]string{"agent.privileged=yes"}, "at '/agent/privileged'"},
		// The host folder now follows agent.hostOS.
		{[]string{"agent.persistentConfigPath=/oem"}, "at '/agent': additional properties 'persistentConfigPath' not allowed"},
		{[]string{"unknownKey=1"}, "additional properties 'unknownKey' not allowed"},
		{[]string{"image.registry=ghcr.io"}, "at '/image': additional properties 'registry' not allowed"},
		{[]string{"metrics.port=0"}, "at '/metrics/port'"},
		{[]string{"webhook.port=65536"}, "at '/webhook/port'"},
		{[]string{"webhook.service.port=0"}, "at '/webhook/service/port'"},
		{[]string{"logLevel=warn"}, "at '/logLevel'"},
		{[]string{"leaderElection.leaseDuration=15"}, "at '/leaderElection/leaseDuration'"},
		{[]string{"leaderElection.retryPeriod=2 s"}, "at '/leaderElection/retryPeriod'"},
		{[]string{"leaderElection.renewDeadline=1500ms"}, "at '/leaderElection/renewDeadline'"},
		{[]string{"legacy.eventComponent=" + strings.Repeat("c", 129)}, "at '/legacy/eventComponent'"},
		{[]string{"cluster.heartbeatStaleAfter=30sec"}, "at '/cluster/heartbeatStaleAfter'"},
		{[]string{"cluster.profileRef=Not A Name"}, "at '/cluster/profileRef'"},
		{[]string{"webhook.certManager.duration=90d"}, "at '/webhook/certManager/duration'"},
		{[]string{"metrics.serviceMonitor.interval=30 seconds"}, "at '/metrics/serviceMonitor/interval'"},
		{[]string{"nodeSelector.disk=1"}, "at '/nodeSelector/disk'"},
		{[]string{"profile.trustedKeys.a/b=key"}, "at '/profile/trustedKeys': additional properties 'a/b' not allowed"},
		{[]string{"audit.persistence.size=1GB"}, "at '/audit/persistence/size'"},
		{[]string{"audit.ship.url=ftp://audit.example.com"}, "at '/audit/ship/url'"},
		{[]string{"audit.keySecret=Key_Secret"}, "at '/audit/keySecret'"},
		{[]string{"imagePullSecrets[0].secret=regcred"}, "at '/imagePullSecrets/0'"},
		{[]string{"webhook.enabled=yes please"}, "at '/webhook/enabled'"},
		{[]string{"podDisruptionBudget.maxUnavailable=2"}, "at '/podDisruptionBudget': additional properties 'maxUnavailable' not allowed"},
		{[]string{"fleet.hubReader.serviceAccount.name=Fleet_Hub"}, "at '/fleet/hubReader/serviceAccount/name'"},
		{[]string{"fleet.hubReader.enabled=yes"}, "at '/fleet/hubReader/enabled'"},
		{[]string{"fleet.hubReader.serviceAccount.create=yes"}, "at '/fleet/hubReader/serviceAccount/create'"},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			t.Parallel()
			args := []string{"template", "nodewright", chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, stderr, err := helm(t, args...)
			if err == nil {
				t.Fatalf("helm accepted --set %s", strings.Join(tc.set, " --set "))
			}
			if !strings.Contains(stderr, schemaError) || !strings.Contains(stderr, tc.names) {
				t.Fatalf("helm refused --set %s, but not with a schema error naming it (%q):\n%s", strings.Join(tc.set, " --set "), tc.names, stderr)
			}
		})
	}
	// Values that are each valid but conflict: the chart's own checks (nodewright.validate).
	for _, tc := range []struct {
		set   []string
		names string
	}{
		{[]string{"audit.enabled=true", "audit.keySecret=k"}, "replicas: 2 with audit.enabled"},
		{[]string{"audit.enabled=true", "replicas=1"}, "audit.keySecret: required"},
		{[]string{"cluster.profileRef=site"}, "cluster.profileRef:"},
		{[]string{"agent.enabled=true", "agent.namespace=" + releaseNS}, "agent.namespace:"},
		{[]string{"fleet.hubReader.enabled=true"}, "fleet.hubReader: enabled with no identity"},
		{[]string{"fleet.hubReader.enabled=true", "fleet.hubReader.user=hub", "fleet.hubReader.serviceAccount.create=true"}, "fleet.hubReader.serviceAccount.create: set fleet.hubReader.serviceAccount.name"},
		{[]string{"fleet.hubReader.serviceAccount.name=hub", "fleet.hubReader.serviceAccount.create=true"}, "fleet.hubReader.serviceAccount.create: set fleet.hubReader.enabled too"},
		// The operator refuses to start with these (operator.Options.Validate).
		{[]string{"leaderElection.leaseDuration=5s"}, "leaderElection.renewDeadline: 10s must be shorter than leaderElection.leaseDuration (5s)"},
		{[]string{"leaderElection.retryPeriod=10s"}, "leaderElection.retryPeriod: 10s must be shorter than leaderElection.renewDeadline (10s)"},
		// The CRD refuses these, and the operator could not apply the NodewrightCluster.
		{[]string{"cluster.heartbeatStaleAfter=90m"}, "cluster.heartbeatStaleAfter: 90m is not between 1s and 1h"},
		{[]string{"cluster.heartbeatStaleAfter=0s"}, "cluster.heartbeatStaleAfter: 0s is not between 1s and 1h"},
		{[]string{`podLabels.app\.kubernetes\.io/component=x`}, "podLabels: app.kubernetes.io/component is the chart's own selector label"},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			t.Parallel()
			args := []string{"template", "nodewright", chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, stderr, err := helm(t, args...)
			if err == nil || !strings.Contains(stderr, tc.names) {
				t.Fatalf("helm template --set %s: want an error naming %q, got %v:\n%s", strings.Join(tc.set, " --set "), tc.names, err, stderr)
			}
		})
	}
}

// TestSchemaAcceptsGoodValues: custom values of every kind render.
func TestSchemaAcceptsGoodValues(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, set := range [][]string{
		{"replicas=0"},
		{"replicas=5"},
		{"image.digest=" + digest, "copyImage.digest=" + digest},
		{"image.tag=v0.2.0-rc.1_build.7"},
		{"image.repository=localhost:5000/nodewright-operator"},
		{"leaderElection.leaseDuration=90s", "leaderElection.renewDeadline=60s", "leaderElection.retryPeriod=3s"},
		{"cluster.heartbeatStaleAfter=1h"},
		{"webhook.service.externalName=host.docker.internal", "webhook.service.port=9443"},
		{"webhook.certMode=cert-manager", "webhook.certManager.issuerRef.name=site-ca", "webhook.certManager.issuerRef.kind=ClusterIssuer"},
		{"webhook.enabled=false", "metrics.enabled=false", "networkPolicy.enabled=false", "podDisruptionBudget.enabled=false", "cluster.create=false"},
		{"logLevel=error", "image.pullPolicy=Never"},
		{"metrics.serviceMonitor.interval=1m30s"},
		{"legacy.namespace=kube-system", "legacy.configMapName=node-init.state"},
		{"agent.hostOS=Talos", "agent.drbd.enabled=false"},
		{"fleet.hubReader.enabled=true", "fleet.hubReader.user=system:fleet:hub"},
		{"fleet.hubReader.enabled=true", "fleet.hubReader.serviceAccount.name=fleet-hub"},
		{"fleet.hubReader.enabled=true", "fleet.hubReader.serviceAccount.name=fleet-hub", "fleet.hubReader.serviceAccount.create=true"},
		{"agent.hostOS=Kairos", "agent.privileged=true", "agent.terminationGracePeriodSeconds=120"},
	} {
		t.Run(strings.Join(set, ","), func(t *testing.T) {
			t.Parallel()
			var args []string
			for _, s := range set {
				args = append(args, "--set", s)
			}
			render(t, args...)
		})
	}
	t.Run("all-on", func(t *testing.T) {
		t.Parallel()
		render(t, "-f", allOn)
	})
}

// TestSchemaDescribesValues: values.schema.json describes every value with the words of its
// values.yaml comment, closes every object the chart defines, and leaves open only the maps
// that are free-form.
func TestSchemaDescribesValues(t *testing.T) {
	checkSchemaDescribesValues(t, chartDir, map[string]bool{
		"resources": true, "nodeSelector": true, "affinity": true, "podAnnotations": true, "podLabels": true,
		"profile.trustedKeys": true, "webhook.certManager.issuerRef": true, "metrics.serviceMonitor.labels": true,
		"agent.resources": true, "agent.nodeSelector": true, "linstor.gate.resources": true,
	})
}

// checkSchemaDescribesValues checks a chart's values.schema.json against its values.yaml: a
// description equal to each value's comment, a type for each, every object closed but the
// free-form maps.
func checkSchemaDescribesValues(t *testing.T, chartDir string, freeForm map[string]bool) {
	t.Helper()
	root, _ := tools(t)
	data, err := os.ReadFile(filepath.Join(root, chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	comments := valuesComments(t, filepath.Join(root, chartDir, "values.yaml"))
	if schema["additionalProperties"] != false {
		t.Error("values.schema.json: the top level must have additionalProperties: false")
	}
	var walk func(prefix string, node map[string]any)
	walk = func(prefix string, node map[string]any) {
		props, _ := node["properties"].(map[string]any)
		for key, p := range props {
			path := prefix + key
			prop, _ := p.(map[string]any)
			if prop["type"] == nil {
				t.Errorf("values.schema.json: %s has no type", path)
			}
			desc, _ := prop["description"].(string)
			switch comment, ok := comments[path]; {
			case !ok:
				t.Errorf("values.yaml: %s has no comment (values.schema.json says %q)", path, desc)
			case comment != desc:
				t.Errorf("%s: the schema's description and the values.yaml comment differ:\n  schema: %q\n  values: %q", path, desc, comment)
			}
			if prop["type"] != "object" {
				continue
			}
			_, defined := prop["properties"]
			switch {
			case defined && prop["additionalProperties"] != false:
				t.Errorf("values.schema.json: %s defines its properties but does not refuse others (additionalProperties: false)", path)
			case !defined && !freeForm[path]:
				t.Errorf("values.schema.json: %s is an object without properties; define them, or add it to the free-form maps here", path)
			}
			walk(path+".", prop)
		}
	}
	walk("", schema)
}

// valuesComments reads the comment above each key of values.yaml, by dotted path: the lines of
// the comment block directly above the key, joined, without the `# ` and helm-docs' `-- `.
func valuesComments(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type level struct {
		indent int
		key    string
	}
	comments := map[string]string{}
	var stack []level
	var block []string
	blockIndent := -1 // lines more indented than this belong to a block scalar
	key := regexp.MustCompile(`^([A-Za-z0-9_.-]+):(\s|$)`)
	for _, line := range strings.Split(string(data), "\n") {
		text := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if blockIndent >= 0 {
			if text == "" || indent > blockIndent {
				continue
			}
			blockIndent = -1
		}
		switch {
		case text == "":
			block = nil
		case strings.HasPrefix(text, "#"):
			block = append(block, strings.TrimSpace(strings.TrimPrefix(text, "#")))
		case key.MatchString(text):
			for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, level{indent, key.FindStringSubmatch(text)[1]})
			var keys []string
			for _, l := range stack {
				keys = append(keys, l.key)
			}
			if len(block) > 0 {
				comments[strings.Join(keys, ".")] = strings.TrimPrefix(strings.Join(block, " "), "-- ")
			}
			if strings.HasSuffix(text, "|") || strings.HasSuffix(text, ">") || strings.HasSuffix(text, "|-") || strings.HasSuffix(text, ">-") {
				blockIndent = indent
			}
			block = nil
		default: // a list item or a flow value's continuation
			block = nil
		}
	}
	return comments
}

// pod is a pod template the chart renders.
type pod struct {
	owner object
	meta  metav1.ObjectMeta
	spec  corev1.PodSpec
}

// pods returns every pod template among objs, and fails the test on an object that has one in
// a kind this test does not know.
func pods(t *testing.T, objs []object) []pod {
	t.Helper()
	var out []pod
	for _, o := range objs {
		switch o.Kind {
		case "Deployment":
			var d appsv1.Deployment
			o.decode(t, &d)
			out = append(out, pod{o, d.Spec.Template.ObjectMeta, d.Spec.Template.Spec})
		case "DaemonSet":
			var d appsv1.DaemonSet
			o.decode(t, &d)
			out = append(out, pod{o, d.Spec.Template.ObjectMeta, d.Spec.Template.Spec})
		case "StatefulSet":
			var s appsv1.StatefulSet
			o.decode(t, &s)
			out = append(out, pod{o, s.Spec.Template.ObjectMeta, s.Spec.Template.Spec})
		case "ReplicaSet":
			var r appsv1.ReplicaSet
			o.decode(t, &r)
			out = append(out, pod{o, r.Spec.Template.ObjectMeta, r.Spec.Template.Spec})
		case "Job":
			var j batchv1.Job
			o.decode(t, &j)
			out = append(out, pod{o, j.Spec.Template.ObjectMeta, j.Spec.Template.Spec})
		case "CronJob":
			var c batchv1.CronJob
			o.decode(t, &c)
			out = append(out, pod{o, c.Spec.JobTemplate.Spec.Template.ObjectMeta, c.Spec.JobTemplate.Spec.Template.Spec})
		case "Pod":
			var p corev1.Pod
			o.decode(t, &p)
			out = append(out, pod{o, p.ObjectMeta, p.Spec})
		default:
			if bytes.Contains(o.Doc, []byte("containers:")) {
				t.Errorf("%s has containers, in a kind this test does not check: add it to pods()", o)
			}
		}
	}
	return out
}

// TestPodSecurityRestricted: every pod the chart runs outside the agent's namespace meets the
// restricted Pod Security level, as the Pod Security admission evaluates it (latest version),
// and also has a read-only root file system, adds no capability and uses the runtime's default
// seccomp profile (restricted also allows NET_BIND_SERVICE and Localhost profiles).
func TestPodSecurityRestricted(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			checked := 0
			for _, p := range pods(t, render(t, v.args...)) {
				if p.owner.Metadata.Namespace == agentNS {
					continue // TestAgentPrivilegedNamespace
				}
				if p.owner.Metadata.Namespace != releaseNS {
					t.Errorf("%s: a pod outside the release's namespace", p.owner)
				}
				checked++
				checkRestricted(t, evaluator, p)
			}
			if checked == 0 {
				t.Error("no pod template rendered: nothing was checked")
			}
		})
	}
}

// checkRestricted checks that the pod meets the restricted Pod Security level, as the Pod
// Security admission evaluates it (latest version), with a read-only root file system, no
// capability added and the runtime's default seccomp profile.
func checkRestricted(t *testing.T, evaluator policy.Evaluator, p pod) {
	t.Helper()
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	result := policy.AggregateCheckResults(evaluator.EvaluatePod(restricted, &p.meta, &p.spec))
	if !result.Allowed {
		t.Errorf("%s does not meet the restricted Pod Security level: %s", p.owner, result.ForbiddenDetail())
	}
	// Checked by hand too: the admission library assumes what API validation ensures
	// (one source per volume, say), which a rendered manifest has not been through.
	for _, vol := range p.spec.Volumes {
		if vol.HostPath != nil {
			t.Errorf("%s: volume %s is a host path", p.owner, vol.Name)
		}
	}
	if p.spec.HostNetwork || p.spec.HostPID || p.spec.HostIPC {
		t.Errorf("%s: shares a host namespace (hostNetwork %v, hostPID %v, hostIPC %v)", p.owner, p.spec.HostNetwork, p.spec.HostPID, p.spec.HostIPC)
	}
	if sc := p.spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: the pod must set runAsNonRoot: true", p.owner)
	}
	podSeccomp := p.spec.SecurityContext != nil && p.spec.SecurityContext.SeccompProfile != nil &&
		p.spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	for _, c := range append(append([]corev1.Container{}, p.spec.InitContainers...), p.spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: container %s has no securityContext", p.owner, c.Name)
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s is privileged", p.owner, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s must set allowPrivilegeEscalation: false", p.owner, c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s must set readOnlyRootFilesystem: true", p.owner, c.Name)
		}
		if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s must drop ALL capabilities and add none", p.owner, c.Name)
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			sc.SeccompProfile == nil && !podSeccomp {
			t.Errorf("%s: container %s must run with the RuntimeDefault seccomp profile", p.owner, c.Name)
		}
	}
}

// TestAgentPrivilegedNamespace: the agent's Namespace is the only Namespace the chart renders
// and the only privileged one; its DaemonSet is the only pod there; and in templates/agent.yaml
// a comment line directly above every host-path mount says why the agent needs it.
func TestAgentPrivilegedNamespace(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, v.args...)
			agentOn := v.agent
			var namespaces []string
			for _, o := range objs {
				if o.Kind == "Namespace" {
					namespaces = append(namespaces, o.Metadata.Name)
				}
				isAgentNS := o.Kind == "Namespace" && o.Metadata.Name == agentNS
				for k, level := range o.Metadata.Labels {
					if strings.HasPrefix(k, "pod-security.kubernetes.io/") && level == "privileged" && !isAgentNS {
						t.Errorf("%s is labelled %s=privileged: only the agent's namespace may be", o, k)
					}
				}
				if o.Metadata.Namespace == agentNS && !agentOn {
					t.Errorf("%s: in the agent's namespace with the agent off", o)
				}
			}
			// The operator reads the agents' heartbeat Leases only where the agents are.
			agents, told := argValue(operatorContainer(t, objs), "--agent-namespace")
			if told != agentOn || (agentOn && agents != agentNS) {
				t.Errorf("the operator's --agent-namespace: %q (set %v); want %s only with the agent", agents, told, agentNS)
			}
			if !agentOn {
				if len(namespaces) > 0 {
					t.Errorf("Namespaces rendered with the agent off: %v", namespaces)
				}
				return
			}
			if !reflect.DeepEqual(namespaces, []string{agentNS}) {
				t.Fatalf("rendered Namespaces %v; want only the agent's, %s", namespaces, agentNS)
			}
			ns, _ := find(objs, "Namespace", agentNS)
			if got := ns.Metadata.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
				t.Errorf("%s: pod-security.kubernetes.io/enforce=%q, want privileged", ns, got)
			}
			var agentPods []string
			for _, p := range pods(t, objs) {
				if p.owner.Metadata.Namespace == agentNS {
					agentPods = append(agentPods, p.owner.Kind+"/"+p.owner.Metadata.Name)
				}
			}
			if !reflect.DeepEqual(agentPods, []string{"DaemonSet/nodewright-agent"}) {
				t.Errorf("pods in the agent's namespace: %v; want only DaemonSet/nodewright-agent", agentPods)
			}
			checkHostPathMountsJustified(t, objs)
		})
	}
}

// checkHostPathMountsJustified checks the template text: every volumeMounts entry of a host-path
// volume of the rendered agent DaemonSet is directly preceded by a comment line.
func checkHostPathMountsJustified(t *testing.T, objs []object) {
	t.Helper()
	o, ok := find(objs, "DaemonSet", "nodewright-agent")
	if !ok {
		t.Fatal("no DaemonSet nodewright-agent with agent.enabled")
	}
	var ds appsv1.DaemonSet
	o.decode(t, &ds)
	hostPaths := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = true
		}
	}
	rendered := map[string]int{}
	for _, c := range append(append([]corev1.Container{}, ds.Spec.Template.Spec.InitContainers...), ds.Spec.Template.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if hostPaths[m.Name] {
				rendered[m.Name]++
			}
		}
	}
	if len(rendered) == 0 {
		t.Fatal("the agent mounts no host path: this check checks nothing; remove it if that is intended")
	}
	root, _ := tools(t)
	data, err := os.ReadFile(filepath.Join(root, chartDir, "templates", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	inTemplate := map[string]int{}
	mountsIndent := -1
	for i, line := range lines {
		text := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if text == "volumeMounts:" {
			mountsIndent = indent
			continue
		}
		if mountsIndent < 0 || text == "" {
			continue
		}
		if indent <= mountsIndent && !strings.HasPrefix(text, "{{") {
			mountsIndent = -1
			continue
		}
		name, ok := strings.CutPrefix(text, "- name: ")
		if !ok || !hostPaths[strings.Trim(name, `"' `)] {
			continue
		}
		name = strings.Trim(name, `"' `)
		inTemplate[name]++
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("templates/agent.yaml:%d: the mount of host-path volume %s has no comment line directly above it saying why the agent needs it", i+1, name)
		}
	}
	for name, n := range rendered {
		if inTemplate[name] != n {
			t.Errorf("host-path volume %s is mounted %d times in the rendered DaemonSet but %d times as a '- name: %s' entry of volumeMounts in templates/agent.yaml: this check cannot see the others", name, n, inTemplate[name], name)
		}
	}
}

// operatorContainer is the operator's container of the rendered Deployment.
func operatorContainer(t *testing.T, objs []object) corev1.Container {
	t.Helper()
	o, ok := find(objs, "Deployment", "nodewright-operator")
	if !ok {
		t.Fatal("no Deployment nodewright-operator")
	}
	var d appsv1.Deployment
	o.decode(t, &d)
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "operator" {
			return c
		}
	}
	t.Fatalf("%s has no container named operator", o)
	return corev1.Container{}
}

// argValue is the value of the container's --flag=value argument.
func argValue(c corev1.Container, flag string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestImages: by default the images are tagged v<appVersion>; with the digests `make images`
// writes (bin/images/digests.yaml), the operator's image and its --copy-image are referenced by
// digest, which wins over a tag.
func TestImages(t *testing.T) {
	root, _ := tools(t)
	chartYAML, err := os.ReadFile(filepath.Join(root, chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: no appVersion (%v)", err)
	}
	const (
		operatorRepo = "ghcr.io/spectrocloud/nodewright-operator"
		copyRepo     = "ghcr.io/spectrocloud/nodewright-copy"
		agentRepo    = "ghcr.io/spectrocloud/nodewright-agent"
	)
	check := func(t *testing.T, objs []object, operator, copier string) {
		t.Helper()
		c := operatorContainer(t, objs)
		if c.Image != operator {
			t.Errorf("operator image %q, want %q", c.Image, operator)
		}
		if got, ok := argValue(c, "--copy-image"); got != copier {
			t.Errorf("--copy-image=%q (present: %v), want %q", got, ok, copier)
		}
		// What the operator writes to its NodewrightCluster's status.operatorVersion, where a
		// fleet hub reads it: the version its Deployment's label says.
		if got, ok := argValue(c, "--operator-version"); got != chart.AppVersion {
			t.Errorf("--operator-version=%q (present: %v), want the appVersion %q", got, ok, chart.AppVersion)
		}
	}
	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		objs := render(t, "--set", "agent.enabled=true")
		check(t, objs, operatorRepo+":v"+chart.AppVersion, copyRepo+":v"+chart.AppVersion)
		o, _ := find(objs, "DaemonSet", "nodewright-agent")
		var ds appsv1.DaemonSet
		o.decode(t, &ds)
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != agentRepo+":v"+chart.AppVersion {
			t.Errorf("agent image %q, want %s:v%s", got, agentRepo, chart.AppVersion)
		}
	})
	t.Run("tag", func(t *testing.T) {
		t.Parallel()
		check(t, render(t, "--set", "image.tag=v9.9.9", "--set", "copyImage.tag=v8.8.8"), operatorRepo+":v9.9.9", copyRepo+":v8.8.8")
	})
	t.Run("digests.yaml", func(t *testing.T) {
		t.Parallel()
		operatorDigest := "sha256:" + strings.Repeat("0a", 32)
		copyDigest := "sha256:" + strings.Repeat("1b", 32)
		agentDigest := "sha256:" + strings.Repeat("2c", 32)
		// The shape hack/images writes into bin/images/digests.yaml.
		digests := filepath.Join(t.TempDir(), "digests.yaml")
		content := fmt.Sprintf("# Written by `make images` (hack/images)\nimage:\n  digest: %s\ncopyImage:\n  digest: %s\n", operatorDigest, copyDigest)
		if err := os.WriteFile(digests, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		// A tag too: the digest wins.
		objs := render(t, "-f", digests, "--set", "image.tag=v9.9.9", "--set", "agent.enabled=true", "--set", "agent.image.digest="+agentDigest)
		check(t, objs, operatorRepo+"@"+operatorDigest, copyRepo+"@"+copyDigest)
		o, _ := find(objs, "DaemonSet", "nodewright-agent")
		var ds appsv1.DaemonSet
		o.decode(t, &ds)
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != agentRepo+"@"+agentDigest {
			t.Errorf("agent image %q, want %s@%s", got, agentRepo, agentDigest)
		}
	})
	t.Run("bin/images/digests.yaml", func(t *testing.T) {
		// When `make images` has run, its file renders too.
		path := filepath.Join(root, "bin", "images", "digests.yaml")
		if _, err := os.Stat(path); err != nil {
			t.Skip("no bin/images/digests.yaml: make images has not run")
		}
		c := operatorContainer(t, render(t, "-f", path))
		if !strings.HasPrefix(c.Image, operatorRepo+"@sha256:") {
			t.Errorf("operator image %q with bin/images/digests.yaml, want %s@sha256:...", c.Image, operatorRepo)
		}
		if got, _ := argValue(c, "--copy-image"); !strings.HasPrefix(got, copyRepo+"@sha256:") {
			t.Errorf("--copy-image=%q with bin/images/digests.yaml, want %s@sha256:...", got, copyRepo)
		}
	})
}

// grantLines expands a rule into lines of the reviewed RBAC list, one per grant: scope, API
// group (core for ""), resource, verb and, when the rule names its objects, the name.
func grantLines(scope string, rule rbacv1.PolicyRule) []string {
	var lines []string
	for _, url := range rule.NonResourceURLs {
		for _, verb := range rule.Verbs {
			lines = append(lines, strings.Join([]string{scope, "nonResourceURL", url, verb}, " "))
		}
	}
	for _, group := range rule.APIGroups {
		if group == "" {
			group = "core"
		}
		for _, resource := range rule.Resources {
			for _, verb := range rule.Verbs {
				base := strings.Join([]string{scope, group, resource, verb}, " ")
				if len(rule.ResourceNames) == 0 {
					lines = append(lines, base)
				}
				for _, name := range rule.ResourceNames {
					lines = append(lines, base+" "+name)
				}
			}
		}
	}
	return lines
}

// role is one ClusterRole or Role the chart renders: its scope ("cluster", or what scopes
// calls its namespace) and its rules.
type role struct {
	obj   object
	scope string
	rules []rbacv1.PolicyRule
}

// rolesOf returns the ClusterRoles and Roles among objs, and their names ("ClusterRole/NAME",
// "Role/NAMESPACE/NAME") for the bindings' check. An aggregated ClusterRole (its grants would
// not be reviewed), a Role in a namespace scopes does not name, and a wildcard in any rule
// fail the test.
func rolesOf(t *testing.T, objs []object, scopes map[string]string) ([]role, map[string]bool) {
	t.Helper()
	var out []role
	names := map[string]bool{}
	for _, o := range objs {
		r := role{obj: o}
		switch o.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			o.decode(t, &cr)
			if cr.AggregationRule != nil {
				t.Errorf("%s aggregates other ClusterRoles: its grants would not be reviewed here", o)
			}
			r.rules, r.scope = cr.Rules, "cluster"
			names["ClusterRole/"+o.Metadata.Name] = true
		case "Role":
			var rr rbacv1.Role
			o.decode(t, &rr)
			var ok bool
			if r.scope, ok = scopes[o.Metadata.Namespace]; !ok {
				t.Errorf("%s: a Role in a namespace this test does not know; add it to the scopes", o)
				r.scope = "namespace:" + o.Metadata.Namespace
			}
			r.rules = rr.Rules
			names["Role/"+o.Metadata.Namespace+"/"+o.Metadata.Name] = true
		default:
			continue
		}
		for _, rule := range r.rules {
			for _, field := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs} {
				for _, s := range field {
					if strings.Contains(s, "*") {
						t.Errorf("%s: a wildcard in %+v", o, rule)
					}
				}
			}
		}
		out = append(out, r)
	}
	return out, names
}

// bindingOf reads a ClusterRoleBinding or RoleBinding of objs: its role and subjects, failing
// the test when it binds a role the chart does not render (by rolesOf's names); ok is false
// for any other kind.
func bindingOf(t *testing.T, o object, roles map[string]bool) (ref rbacv1.RoleRef, subjects []rbacv1.Subject, ok bool) {
	t.Helper()
	switch o.Kind {
	case "ClusterRoleBinding":
		var b rbacv1.ClusterRoleBinding
		o.decode(t, &b)
		ref, subjects = b.RoleRef, b.Subjects
		if ref.Kind != "ClusterRole" || !roles["ClusterRole/"+ref.Name] {
			t.Errorf("%s binds %s %s, which the chart does not render", o, ref.Kind, ref.Name)
		}
	case "RoleBinding":
		var b rbacv1.RoleBinding
		o.decode(t, &b)
		ref, subjects = b.RoleRef, b.Subjects
		if ref.Kind != "Role" || !roles["Role/"+o.Metadata.Namespace+"/"+ref.Name] {
			t.Errorf("%s binds %s %s, which the chart does not render in its namespace", o, ref.Kind, ref.Name)
		}
	default:
		return ref, nil, false
	}
	return ref, subjects, true
}

// TestRBACReviewed: every grant of every ClusterRole and Role the chart renders (the agent, the
// LINSTOR gate with its client Secret and node registration, and the fleet hub's reader on, so
// that their roles count too) is in testdata/reviewed-rbac.txt and every line there is still
// granted; no wildcard; Secrets only by name and only in the release's namespace (LINSTOR's
// client Secret, get only, in its own, and only to the LINSTOR gate, never to the operator);
// only reads in the legacy namespace and for the fleet hub; bindings only to the chart's roles,
// and only to the chart's ServiceAccounts or, for the fleet hub's reader, the identity the
// values name.
func TestRBACReviewed(t *testing.T) {
	root, _ := tools(t)
	objs := render(t, "--set", "legacy.namespace="+legacyNS, "--set", "agent.enabled=true", "--set", "agent.namespace="+agentNS,
		"--set", "linstor.url=https://linstor-controller.piraeus-datastore.svc:3371",
		"--set", "linstor.clientSecret.namespace=piraeus-datastore", "--set", "linstor.clientSecret.name=linstor-client-tls",
		"--set", "linstor.gate.registerNodes=true",
		"--set", "fleet.hubReader.enabled=true", "--set", "fleet.hubReader.user=fleet-hub", "--set", "fleet.hubReader.group=fleet-hubs",
		"--set", "fleet.hubReader.serviceAccount.namespace=fleet-hub-ns", "--set", "fleet.hubReader.serviceAccount.name=fleet-hub",
		"--set", "fleet.hubReader.serviceAccount.create=true")
	// The fleet hub's reader (templates/fleet-hub-reader.yaml) grants another identity than the
	// operator's: its lines carry the prefix fleet-hub: before their scope; so does the LINSTOR
	// gate's, linstor-gate:.
	const hubReader = "nodewright-fleet-hub-reader"
	const linstorGate = "nodewright-linstor-gate"
	hubSubjects := []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "fleet-hub"},
		{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "fleet-hubs"}, {Kind: "ServiceAccount", Namespace: "fleet-hub-ns", Name: "fleet-hub"}}
	scopes := map[string]string{releaseNS: "namespace:release", legacyNS: "namespace:legacy", "default": "namespace:default", agentNS: "namespace:agent",
		"piraeus-datastore": "namespace:linstor"}
	granted := map[string]bool{}
	rs, roles := rolesOf(t, objs, scopes)
	for _, r := range rs {
		o, scope, rules := r.obj, r.scope, r.rules
		if o.Metadata.Name == hubReader {
			scope = "fleet-hub:" + scope
		}
		// The LINSTOR gate's roles (templates/linstor-access.yaml) grant its own ServiceAccount.
		if strings.HasPrefix(o.Metadata.Name, linstorGate) {
			scope = "linstor-gate:" + scope
		}
		for _, rule := range rules {
			for _, line := range grantLines(scope, rule) {
				granted[line] = true
				f := strings.Fields(line)
				if f[1] == "core" && f[2] == "secrets" && ((scope != "namespace:release" && scope != "linstor-gate:namespace:linstor") || len(f) < 5 || (scope == "linstor-gate:namespace:linstor" && f[3] != "get")) {
					t.Errorf("%s: %q: Secrets may be granted only by name, and only in the release's namespace (or, to the LINSTOR gate alone, get on LINSTOR's client Secret in its own)", o, line)
				}
				if strings.HasPrefix(scope, "namespace:linstor") {
					t.Errorf("%s: %q: the operator is granted something in LINSTOR's namespace; only the LINSTOR gate may be", o, line)
				}
				if scope == "namespace:legacy" && f[3] != "get" && f[3] != "list" && f[3] != "watch" {
					t.Errorf("%s: %q: the legacy namespace is read-only (get, list, watch)", o, line)
				}
				if strings.HasPrefix(scope, "fleet-hub:") && f[3] != "get" && f[3] != "list" && f[3] != "watch" {
					t.Errorf("%s: %q: the fleet hub is read-only (get, list, watch)", o, line)
				}
			}
		}
	}
	// Bindings: only to the roles above (a binding to cluster-admin or edit would grant what this
	// list does not show), and only to the chart's ServiceAccounts.
	for _, o := range objs {
		ref, subjects, ok := bindingOf(t, o, roles)
		if !ok {
			continue
		}
		if o.Metadata.Name == hubReader {
			if ref.Name != hubReader || !reflect.DeepEqual(subjects, hubSubjects) {
				t.Errorf("%s binds %s %s to %+v; want %s to the values' identity %+v", o, ref.Kind, ref.Name, subjects, hubReader, hubSubjects)
			}
			continue
		}
		for _, s := range subjects {
			if s.Kind == "ServiceAccount" && s.Namespace == "fleet-hub-ns" && s.Name == "fleet-hub" {
				t.Errorf("%s binds the fleet hub's ServiceAccount to %s %s: it gets the reader roles only", o, ref.Kind, ref.Name)
			}
		}
		gateBinding := strings.HasPrefix(o.Metadata.Name, linstorGate)
		if o.Metadata.Namespace == "piraeus-datastore" && !gateBinding {
			t.Errorf("%s: a binding in LINSTOR's namespace that is not the LINSTOR gate's", o)
		}
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || (s.Namespace != releaseNS && s.Namespace != agentNS) {
				t.Errorf("%s binds %s %s/%s: only the chart's ServiceAccounts may be bound", o, s.Kind, s.Namespace, s.Name)
			}
			if gateBinding != (s.Name == linstorGate) || (gateBinding && (!strings.HasPrefix(ref.Name, linstorGate) || s.Namespace != releaseNS)) {
				t.Errorf("%s binds %s %s to %s/%s: the LINSTOR gate's roles go to its ServiceAccount alone, and it gets no other", o, ref.Kind, ref.Name, s.Namespace, s.Name)
			}
		}
	}

	checkHubReaderAccount(t, objs)
	compareReviewed(t, root, reviewedRBAC, granted)
}

// checkHubReaderAccount: with fleet.hubReader.serviceAccount.create the chart makes the hub's
// ServiceAccount fleet-hub-ns/fleet-hub and its token Secret fleet-hub-token, which the API
// server fills for that ServiceAccount alone (the bindings are checked in TestRBACReviewed).
func checkHubReaderAccount(t *testing.T, objs []object) {
	t.Helper()
	var sa corev1.ServiceAccount
	o, ok := find(objs, "ServiceAccount", "fleet-hub")
	if !ok || o.Metadata.Namespace != "fleet-hub-ns" {
		t.Fatalf("fleet.hubReader.serviceAccount.create renders no ServiceAccount fleet-hub-ns/fleet-hub (%v)", o)
	}
	o.decode(t, &sa)
	if sa.AutomountServiceAccountToken != nil || len(sa.Secrets) > 0 {
		t.Errorf("%s: want a plain ServiceAccount", o)
	}
	o, ok = find(objs, "Secret", "fleet-hub-token")
	if !ok || o.Metadata.Namespace != "fleet-hub-ns" {
		t.Fatalf("fleet.hubReader.serviceAccount.create renders no Secret fleet-hub-ns/fleet-hub-token (%v)", o)
	}
	var secret corev1.Secret
	o.decode(t, &secret)
	if secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != "fleet-hub" || len(secret.Data)+len(secret.StringData) > 0 {
		t.Errorf("%s: type %s, annotations %v, %d keys of data; want an empty kubernetes.io/service-account-token Secret of fleet-hub", o, secret.Type, secret.Annotations, len(secret.Data)+len(secret.StringData))
	}
	for _, o := range objs {
		if (o.Kind == "ServiceAccount" || o.Kind == "Secret") && o.Metadata.Namespace == "fleet-hub-ns" && o.Metadata.Name != "fleet-hub" && o.Metadata.Name != "fleet-hub-token" {
			t.Errorf("%s: in the hub reader's namespace", o)
		}
	}
}

// compareReviewed fails the test on a grant the reviewed list does not have, and on a line of
// the list that is no longer granted.
func compareReviewed(t *testing.T, root, reviewedRBAC string, granted map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, reviewedRBAC))
	if err != nil {
		t.Fatal(err)
	}
	reviewed := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if n := len(strings.Fields(line)); n < 4 || n > 5 {
			t.Errorf("%s:%d: %q is not '<scope> <apiGroup or core> <resource> <verb> [resourceName]'", reviewedRBAC, i+1, line)
		}
		if reviewed[line] {
			t.Errorf("%s:%d: %q twice", reviewedRBAC, i+1, line)
		}
		reviewed[line] = true
	}
	var unreviewed, stale []string
	for line := range granted {
		if !reviewed[line] {
			unreviewed = append(unreviewed, line)
		}
	}
	for line := range reviewed {
		if !granted[line] {
			stale = append(stale, line)
		}
	}
	sort.Strings(unreviewed)
	sort.Strings(stale)
	if len(unreviewed) > 0 {
		t.Errorf("the chart grants what %s does not list. Adding a line there is a security review: say why in the kubebuilder marker, and narrow it if you can:\n  %s",
			reviewedRBAC, strings.Join(unreviewed, "\n  "))
	}
	if len(stale) > 0 {
		t.Errorf("%s lists grants the chart no longer makes; remove them:\n  %s", reviewedRBAC, strings.Join(stale, "\n  "))
	}
}

// TestRBACMatchesMarkers: the chart's ClusterRole and Roles grant exactly what
// config/rbac/role.yaml (the kubebuilder markers) does, the markers' namespaces mapped to the
// release's, the legacy one, default and the agents' (rendered with the agent only).
func TestRBACMatchesMarkers(t *testing.T) {
	root, _ := tools(t)
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scopes := map[string]string{"": "cluster", "nodewright-system": "namespace:release", "node-init": "namespace:legacy", "default": "namespace:default",
		"nodewright-agent": "namespace:agent"}
	want := map[string]bool{}
	for _, o := range parse(t, string(data)) {
		var r rbacv1.ClusterRole // a Role has the same fields
		o.decode(t, &r)
		scope, ok := scopes[o.Metadata.Namespace]
		if !ok {
			t.Errorf("config/rbac/role.yaml: %s in a namespace the chart does not map", o)
		}
		for _, rule := range r.Rules {
			for _, line := range grantLines(scope, rule) {
				want[line] = true
			}
		}
	}
	scopes = map[string]string{"": "cluster", releaseNS: "namespace:release", legacyNS: "namespace:legacy", "default": "namespace:default",
		agentNS: "namespace:agent"}
	got := map[string]bool{}
	for _, o := range render(t, "--set", "legacy.namespace="+legacyNS, "--set", "agent.enabled=true", "--set", "agent.namespace="+agentNS) {
		if (o.Kind != "ClusterRole" && o.Kind != "Role") || !strings.HasPrefix(o.Metadata.Name, "nodewright-operator") {
			continue
		}
		var r rbacv1.ClusterRole
		o.decode(t, &r)
		scope, ok := scopes[o.Metadata.Namespace]
		if !ok {
			t.Errorf("%s: an operator role in a namespace the markers do not name", o)
		}
		for _, rule := range r.Rules {
			for _, line := range grantLines(scope, rule) {
				got[line] = true
			}
		}
	}
	var extra, missing []string
	for line := range got {
		if !want[line] {
			extra = append(extra, line)
		}
	}
	for line := range want {
		if !got[line] {
			missing = append(missing, line)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra)+len(missing) > 0 {
		t.Errorf("the chart's roles differ from config/rbac/role.yaml (run make generate; the chart must grant what the markers say):\n  only in the chart: %v\n  only in the markers: %v", extra, missing)
	}
}

// TestUninstallLeaves: only the audit trail's volume is kept when the release is uninstalled
// (helm.sh/resource-policy: keep), and the CRDs are in crds/, which Helm never deletes, equal to
// config/crd/bases; no template renders a CRD.
func TestUninstallLeaves(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, v.args...)
			var kept []string
			for _, o := range objs {
				if o.Metadata.Annotations["helm.sh/resource-policy"] != "" {
					kept = append(kept, o.Kind+"/"+o.Metadata.Name+" "+o.Metadata.Annotations["helm.sh/resource-policy"])
				}
				if o.Kind == "CustomResourceDefinition" {
					t.Errorf("%s: CRDs belong in crds/, not templates/ (Helm would delete them, and every Nodewright object, on uninstall)", o)
				}
			}
			var want []string
			if _, audit := find(objs, "PersistentVolumeClaim", "nodewright-audit"); audit {
				want = []string{"PersistentVolumeClaim/nodewright-audit keep"}
			} else if v.name != "defaults" && v.name != "agent-off" {
				t.Errorf("%s: audit.enabled renders no PersistentVolumeClaim nodewright-audit", v.name)
			}
			if !reflect.DeepEqual(kept, want) {
				t.Errorf("objects with helm.sh/resource-policy: %v; want %v", kept, want)
			}
		})
	}
	t.Run("crds", func(t *testing.T) {
		root, _ := tools(t)
		bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
		if err != nil || len(bases) == 0 {
			t.Fatalf("no CRDs in config/crd/bases: %v", err)
		}
		inChart, err := filepath.Glob(filepath.Join(root, chartDir, "crds", "*"))
		if err != nil {
			t.Fatal(err)
		}
		names := func(paths []string) []string {
			var out []string
			for _, p := range paths {
				out = append(out, filepath.Base(p))
			}
			return out
		}
		if !reflect.DeepEqual(names(bases), names(inChart)) {
			t.Fatalf("crds/ holds %v, config/crd/bases %v (run make generate)", names(inChart), names(bases))
		}
		for _, base := range bases {
			want, err := os.ReadFile(base)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, chartDir, "crds", filepath.Base(base)))
			if err != nil {
				t.Fatal(err)
			}
			header, rest, _ := bytes.Cut(got, []byte("\n"))
			if !bytes.HasPrefix(header, []byte("# Generated from ")) || !bytes.Equal(rest, want) {
				t.Errorf("crds/%s is not config/crd/bases/%[1]s under its generated header line (run make generate)", filepath.Base(base))
			}
		}
	})
}
