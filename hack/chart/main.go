// Command chart writes the parts of the Helm charts (charts/nodewright, the member's, and
// charts/nodewright-fleet, the fleet hub's) that are generated from what controller-gen
// generates, so that the charts cannot drift from the code:
//
//   - crds/: the CustomResourceDefinitions of config/crd/bases, as they are (the hub's chart:
//     config/crd/fleet, and the ClusterProfile CRD of the pinned sigs.k8s.io/cluster-inventory-api);
//   - templates/rbac.yaml: the operator's ClusterRole and Roles of config/rbac/role.yaml (the
//     kubebuilder RBAC markers), with the markers' namespaces mapped to the chart's, and their
//     bindings to the operator's ServiceAccount;
//   - templates/webhooks.yaml: the webhook configurations of config/webhook/manifests.yaml,
//     calling the Service of the release's namespace;
//   - README.md (both charts): the table of the chart's values, from values.schema.json and
//     values.yaml.
//
// Run it from the repository's root:
//
//	go run ./hack/chart
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// command is how the files are regenerated; their headers print it.
const command = "go run ./hack/chart (make generate)"

// namespaces maps the namespaces the RBAC markers name to the chart's: the Role's name, the
// template expression of its namespace, and the condition (a template expression) under
// which the chart renders it, when it exists only then.
var namespaces = map[string]struct{ name, expr, cond string }{
	// The operator's own namespace: the release's.
	"nodewright-system": {"nodewright-operator", "{{ .Release.Namespace }}", ""},
	// The legacy DaemonSet's namespace.
	"node-init": {"nodewright-operator-legacy", "{{ .Values.legacy.namespace }}", ""},
	// Where the API server keeps Events about Nodes.
	"default": {"nodewright-operator-node-events", "default", ""},
	// The node agents' namespace, which the chart makes only with the agent.
	"nodewright-agent": {"nodewright-operator-agent", "{{ .Values.agent.namespace }}", ".Values.agent.enabled"},
}

const (
	chart      = "charts/nodewright"
	fleetChart = "charts/nodewright-fleet"
	// inventoryModule holds the ClusterProfile CRD (KEP-4322), which the hub watches.
	inventoryModule   = "sigs.k8s.io/cluster-inventory-api"
	clusterProfileCRD = "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run() error {
	files, err := filepath.Glob("config/crd/bases/*.yaml")
	if err != nil {
		return err
	}
	if err := crds(chart, files, nil); err != nil {
		return err
	}
	if err := rbac(); err != nil {
		return err
	}
	if err := webhooks(); err != nil {
		return err
	}
	if err := readme(chart, memberIntro); err != nil {
		return err
	}
	// The hub's chart: its own CRD, and the ClusterProfile CRD of the module the hub is built
	// with, without which it cannot start (it watches ClusterProfiles).
	files, err = filepath.Glob("config/crd/fleet/*.yaml")
	if err != nil {
		return err
	}
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", inventoryModule).Output()
	if err != nil {
		return fmt.Errorf("go list -m %s: %w", inventoryModule, err)
	}
	if len(bytes.TrimSpace(dir)) == 0 {
		return fmt.Errorf("go list -m %s: not downloaded (go mod download %[1]s)", inventoryModule)
	}
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", inventoryModule).Output()
	if err != nil {
		return fmt.Errorf("go list -m %s: %w", inventoryModule, err)
	}
	profile := filepath.Join(strings.TrimSpace(string(dir)), clusterProfileCRD)
	named := map[string]string{profile: inventoryModule + "@" + strings.TrimSpace(string(version)) + "/" + clusterProfileCRD}
	if err := crds(fleetChart, append(files, profile), named); err != nil {
		return err
	}
	return readme(fleetChart, fleetIntro)
}

// crds copies the CRD files into the chart's crds/, which Helm installs before the templates
// and never upgrades or deletes (docs/install.md says how an upgrade applies them). A file's
// header names it as named says, else by its path.
func crds(chart string, files []string, named map[string]string) error {
	dir := filepath.Join(chart, "crds")
	old, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRDs for %s (run from the repository root)", chart)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		name := f
		if n, ok := named[f]; ok {
			name = n
		}
		header := fmt.Sprintf("# Generated from %s by %s; do not edit.\n", name, command)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), append([]byte(header), data...), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// rbac renders the generated roles and their bindings.
func rbac() error {
	data, err := os.ReadFile("config/rbac/role.yaml")
	if err != nil {
		return err
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "{{- /* Generated from config/rbac/role.yaml (the kubebuilder RBAC markers) by %s; do not edit. */ -}}\n", command)
	seen := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(strings.Trim(doc, "-\n")) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.UnmarshalStrict([]byte(doc), &head); err != nil {
			return fmt.Errorf("config/rbac/role.yaml: %w", err)
		}
		rules, err := yaml.Marshal(head.Rules)
		if err != nil {
			return err
		}
		switch head.Kind {
		case "ClusterRole":
			fmt.Fprintf(&out, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: nodewright-operator
  labels:
    {{- include "nodewright.labels" . | nindent 4 }}
rules:
%s---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: nodewright-operator
  labels:
    {{- include "nodewright.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: nodewright-operator
subjects:
- kind: ServiceAccount
  name: nodewright-operator
  namespace: {{ .Release.Namespace }}
`, rules)
		case "Role":
			ns, ok := namespaces[head.Metadata.Namespace]
			if !ok {
				return fmt.Errorf("config/rbac/role.yaml: a Role in namespace %q, which the chart does not map (hack/chart/main.go)", head.Metadata.Namespace)
			}
			seen[head.Metadata.Namespace] = true
			if ns.cond != "" {
				fmt.Fprintf(&out, "{{- if %s }}\n", ns.cond)
			}
			fmt.Fprintf(&out, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: %[1]s
  namespace: %[2]s
  labels:
    {{- include "nodewright.labels" . | nindent 4 }}
rules:
%[3]s---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: %[1]s
  namespace: %[2]s
  labels:
    {{- include "nodewright.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: %[1]s
subjects:
- kind: ServiceAccount
  name: nodewright-operator
  namespace: {{ .Release.Namespace }}
`, ns.name, ns.expr, rules)
			if ns.cond != "" {
				fmt.Fprintf(&out, "{{- end }}\n")
			}
		default:
			return fmt.Errorf("config/rbac/role.yaml: unexpected kind %q", head.Kind)
		}
	}
	var unused []string
	for n := range namespaces {
		if !seen[n] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		return fmt.Errorf("hack/chart/main.go maps namespaces no Role uses any more: %s", strings.Join(unused, ", "))
	}
	return os.WriteFile(filepath.Join(chart, "templates", "rbac.yaml"), out.Bytes(), 0o644)
}

// webhooks renders the webhook configurations, calling the release's Service.
func webhooks() error {
	data, err := os.ReadFile("config/webhook/manifests.yaml")
	if err != nil {
		return err
	}
	text := string(data)
	const svc = "      name: nodewright-webhook\n      namespace: nodewright-system\n"
	if n := strings.Count(text, svc); n == 0 {
		return errors.New("config/webhook/manifests.yaml: no clientConfig.service naming nodewright-system/nodewright-webhook")
	}
	text = strings.ReplaceAll(text, svc,
		"      name: nodewright-webhook\n      namespace: {{ .Release.Namespace }}\n      port: {{ .Values.webhook.service.port }}\n")
	for _, name := range []string{"nodewright-mutating-webhook", "nodewright-validating-webhook"} {
		meta := "metadata:\n  name: " + name + "\n"
		if !strings.Contains(text, meta) {
			return fmt.Errorf("config/webhook/manifests.yaml: no configuration named %s", name)
		}
		text = strings.Replace(text, meta, meta+`  labels:
    {{- include "nodewright.labels" . | nindent 4 }}
  {{- with include "nodewright.webhookAnnotations" . }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
`, 1)
	}
	text = strings.TrimPrefix(text, "---\n")
	out := fmt.Sprintf("{{- /* Generated from config/webhook/manifests.yaml (the kubebuilder webhook markers) by %s; do not edit. */ -}}\n{{- if .Values.webhook.enabled }}\n---\n%s{{- end }}\n", command, text)
	return os.WriteFile(filepath.Join(chart, "templates", "webhooks.yaml"), []byte(out), 0o644)
}

// readme writes the chart's README.md: what the chart installs, and a table of its values, one
// row per leaf of values.yaml (by dotted path; an object values.schema.json gives no
// properties, such as resources, is a leaf) with the type and description of
// values.schema.json and the default of values.yaml. A key in one file and not the other, or a
// schema property without a description or type, is an error naming the key.
func readme(chart string, intro []string) error {
	schemaData, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		return err
	}
	var schema map[string]any
	if err := json.Unmarshal(schemaData, &schema); err != nil {
		return fmt.Errorf("%s/values.schema.json: %w", chart, err)
	}
	valuesData, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	var values map[string]any
	if err := yaml.Unmarshal(valuesData, &values); err != nil {
		return fmt.Errorf("%s/values.yaml: %w", chart, err)
	}
	// compact renders a default as one line of JSON.
	compact := func(v any) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return fmt.Sprint(v)
		}
		return strings.TrimSpace(b.String())
	}
	// A table cell is one line, its pipes escaped.
	cell := strings.NewReplacer("|", `\|`, "\n", " ")
	var rows [][2]string // dotted path, table row
	var problems []string
	var walk func(prefix string, node, vals map[string]any)
	walk = func(prefix string, node, vals map[string]any) {
		props, _ := node["properties"].(map[string]any)
		for key := range vals {
			if _, ok := props[key]; !ok {
				problems = append(problems, prefix+key+": in values.yaml but not in values.schema.json")
			}
		}
		for key, p := range props {
			path := prefix + key
			prop, _ := p.(map[string]any)
			desc, _ := prop["description"].(string)
			if strings.TrimSpace(desc) == "" {
				problems = append(problems, path+": no description in values.schema.json")
			}
			value, ok := vals[key]
			if !ok {
				problems = append(problems, path+": in values.schema.json but not in values.yaml")
				continue
			}
			if _, nested := prop["properties"]; nested {
				m, ok := value.(map[string]any)
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: an object in values.schema.json, %s in values.yaml", path, compact(value)))
					continue
				}
				walk(path+".", prop, m)
				continue
			}
			var typ string
			switch t := prop["type"].(type) {
			case string:
				typ = t
			case []any:
				typ = strings.Trim(fmt.Sprint(t...), "[]")
			default:
				problems = append(problems, path+": no type in values.schema.json")
			}
			rows = append(rows, [2]string{path, fmt.Sprintf("| `%s` | %s | `%s` | %s |",
				path, typ, cell.Replace(compact(value)), cell.Replace(strings.Join(strings.Fields(desc), " ")))})
		}
	}
	walk("", schema, values)
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%s: values.yaml and values.schema.json disagree:\n  %s", chart, strings.Join(problems, "\n  "))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
	lines := []string{
		"<!-- Generated from values.schema.json and values.yaml by " + command + "; do not edit. -->",
	}
	lines = append(lines, intro...)
	lines = append(lines,
		"## Values",
		"",
		"`values.schema.json` checks every value: Helm refuses an unknown key or a bad value, naming it,",
		"before anything reaches the cluster. The defaults are those of `values.yaml`, as JSON.",
		"",
		"| Key | Type | Default | Description |",
		"| --- | --- | --- | --- |",
	)
	for _, row := range rows {
		lines = append(lines, row[1])
	}
	return os.WriteFile(filepath.Join(chart, "README.md"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// memberIntro is the start of the member chart's README.md.
var memberIntro = []string{
	"# The Nodewright chart",
	"",
	"Nodewright, the operator for the lifecycle of small edge storage clusters. The chart installs:",
	"",
	"- the Nodewright CRDs (`crds/`; Helm installs them first and never upgrades or deletes them);",
	"- the operator, a Deployment in the release's namespace that meets the `restricted` Pod Security",
	"  level, with its admission webhooks, its ServiceAccount and the least-privilege ClusterRole and",
	"  Roles generated from the kubebuilder RBAC markers (read-only in `legacy.namespace`);",
	"- admission policies that hold the operator's ServiceAccount to what its code writes: Jobs only",
	"  as nodewright-copy's unprivileged copy Jobs, and of webhook configurations only the CA bundle",
	"  of its own two;",
	"- the NodewrightCluster spec, from `legacy.*` and `cluster.*`, which the operator applies;",
	"- a PodDisruptionBudget, a NetworkPolicy (the operator admits only what it serves and reaches",
	"  only the API server, DNS, the LINSTOR gate and the audit receiver) and the metrics Service;",
	"  optionally a ServiceMonitor, cert-manager certificates for the webhooks, and the audit trail's",
	"  volume;",
	"- with `linstor.url`, the LINSTOR gate (`nodewright-linstor-gate`, [docs/linstor.md](../../docs/linstor.md#the-linstor-gate)):",
	"  a Deployment of its own, the only holder of LINSTOR's client Secret, which forwards to LINSTOR",
	"  only what a ReplicationUpgrade asks of it, for the operator's projected token alone; the",
	"  operator holds no LINSTOR credential;",
	"- the node agent, a DaemonSet in a namespace of its own (the only one labelled `privileged`):",
	"  on the host's network, as root, with NET_ADMIN and NET_RAW and the host folders it needs,",
	"  each justified in `templates/agent.yaml` and [docs/agent.md](../../docs/agent.md#the-agents-pod);",
	"  on by default (`agent.enabled`); set `agent.hostOS` to the nodes' operating system.",
	"",
	"```sh",
	"helm install nodewright charts/nodewright -n nodewright-system",
	"```",
	"",
	"What to prepare first (the namespace, the images), how to upgrade (the CRDs) and how to remove",
	"it: [docs/install.md](../../docs/install.md).",
	"",
}

// fleetIntro is the start of the fleet hub chart's README.md.
var fleetIntro = []string{
	"# The Nodewright fleet hub chart",
	"",
	"The fleet hub (`nodewright-fleet`, [docs/fleet.md](../../docs/fleet.md)) keeps one",
	"NodewrightClusterSummary per member cluster, read-only on the members. The chart installs, on",
	"the hub cluster:",
	"",
	"- the CRDs (`crds/`: NodewrightClusterSummary, and the ClusterProfile of",
	"  sigs.k8s.io/cluster-inventory-api, which the hub watches; Helm installs them first, skips",
	"  those that exist and never upgrades or deletes them);",
	"- the hub, a Deployment in the release's namespace that meets the `restricted` Pod Security",
	"  level, electing one active replica through a Lease;",
	"- its ServiceAccount and least-privilege RBAC: the summaries (cluster-wide, the only writes),",
	"  the Secrets of the release's namespace (read), the ClusterProfiles of",
	"  `clusterProfileNamespace` (read), its Lease by name and the Events of leader election;",
	"- a NetworkPolicy: the pods admit only the metrics scrape and the probes, and reach only the",
	"  hub cluster's API server, DNS and the members' API servers (`networkPolicy.egress.memberCIDRs`).",
	"",
	"Each member runs the `nodewright` chart with `fleet.hubReader` (and, for a token the hub",
	"holds, `fleet.hubReader.serviceAccount.create`); the hub's kubeconfig Secrets or Secret",
	"Reader's Secrets name them.",
	"",
	"```sh",
	"kubectl create namespace nodewright-fleet",
	"kubectl label namespace nodewright-fleet pod-security.kubernetes.io/enforce=restricted",
	"helm install nodewright-fleet charts/nodewright-fleet -n nodewright-fleet",
	"```",
	"",
	"Registering members, upgrading (the CRDs) and removing it: [docs/fleet.md](../../docs/fleet.md#installing-the-hub).",
	"",
}
