package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ChartObject is an object helm rendered from the chart, with the template it came from.
type ChartObject struct {
	*unstructured.Unstructured
	// Template is the template's path in the chart, e.g. templates/rbac.yaml.
	Template string
}

// Helm is the helm the chart's tests run: $NODEWRIGHT_HELM, which `make test` sets after
// building it, or else bin/tools/helm-<HELM_VERSION> (hack/helm.sh builds it). A missing helm
// fails the test: an unchecked chart is worse than a failing test.
func Helm(t testing.TB, root string) string {
	t.Helper()
	helm := os.Getenv("NODEWRIGHT_HELM")
	if helm == "" {
		version, err := PinnedVersion(root, "HELM_VERSION")
		if err != nil {
			t.Fatal(err)
		}
		helm = filepath.Join(root, "bin", "tools", "helm-"+version)
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm not found at %s: run 'make test', which builds it, or hack/helm.sh", helm)
	}
	return helm
}

// RenderChart renders charts/nodewright as release "nodewright" in namespace ns for the
// pinned Kubernetes version, with helm template's further args (--set, --show-only...), and
// returns what it rendered. helm runs without a kubeconfig and with folders of its own.
func RenderChart(t testing.TB, root, ns string, args ...string) []ChartObject {
	t.Helper()
	helm := Helm(t, root)
	kube, err := PinnedVersion(root, "KUBE_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(helm, append([]string{"template", "nodewright", "charts/nodewright", "--namespace", ns,
		"--kube-version", strings.TrimPrefix(kube, "v")}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(&stdout))
	var objs []ChartObject
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("rendered manifest: %v\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		var template string
		for _, line := range strings.Split(string(doc), "\n") {
			if src, ok := strings.CutPrefix(line, "# Source: nodewright/"); ok {
				template = strings.TrimSpace(src)
				break
			}
		}
		objs = append(objs, ChartObject{Unstructured: u, Template: template})
	}
	return objs
}
