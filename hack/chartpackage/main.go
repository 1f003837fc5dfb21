// Command chartpackage packages the chart with the digests of the images `make images` built,
// so that the packaged chart references them by digest:
//
//	go run ./hack/chartpackage -helm bin/tools/helm-<version> -digests bin/images/digests.yaml -out bin/charts
//
// It copies charts/nodewright, sets image.digest, copyImage.digest, linstor.gate.image.digest
// and agent.image.digest in the copy's values.yaml (comments kept), packages the copy with helm,
// and checks that the package renders the four images by digest (the LINSTOR gate's with a
// linstor.url).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
	goyaml "sigs.k8s.io/yaml/goyaml.v3"
)

func main() {
	chart := flag.String("chart", "charts/nodewright", "the chart folder")
	digests := flag.String("digests", "bin/images/digests.yaml", "the digests `make images` wrote")
	out := flag.String("out", "bin/charts", "folder the package is written to")
	helm := flag.String("helm", "helm", "the helm binary")
	flag.Parse()
	if err := run(*chart, *digests, *out, *helm); err != nil {
		fmt.Fprintln(os.Stderr, "chartpackage:", err)
		os.Exit(1)
	}
}

// imageDigests is the part of digests.yaml this reads.
type imageDigests struct {
	Image     struct{ Digest string } `json:"image"`
	CopyImage struct{ Digest string } `json:"copyImage"`
	LINSTOR   struct {
		Gate struct {
			Image struct{ Digest string } `json:"image"`
		} `json:"gate"`
	} `json:"linstor"`
	Agent struct {
		Image struct{ Digest string } `json:"image"`
	} `json:"agent"`
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

func run(chart, digestsFile, out, helm string) error {
	data, err := os.ReadFile(digestsFile)
	if err != nil {
		return fmt.Errorf("%w (run make images first)", err)
	}
	var d imageDigests
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return fmt.Errorf("%s: %w", digestsFile, err)
	}
	digests := map[string]string{"image": d.Image.Digest, "copyImage": d.CopyImage.Digest, "linstor.gate.image": d.LINSTOR.Gate.Image.Digest,
		"agent.image": d.Agent.Image.Digest}
	for key, v := range digests {
		field := key + ".digest"
		if !digestRE.MatchString(v) {
			return fmt.Errorf("%s: %s %q is not a sha256 digest", digestsFile, field, v)
		}
	}
	work, err := os.MkdirTemp("", "chartpackage-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	dst := filepath.Join(work, filepath.Base(chart))
	if err := copyTree(chart, dst); err != nil {
		return err
	}
	valuesFile := filepath.Join(dst, "values.yaml")
	values, err := os.ReadFile(valuesFile)
	if err != nil {
		return err
	}
	values, err = setDigests(values, digests)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(chart, "values.yaml"), err)
	}
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	pkg, err := exec.Command(helm, "package", dst, "-d", out).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm package: %w\n%s", err, pkg)
	}
	path := strings.TrimSpace(string(pkg[bytes.LastIndex(pkg, []byte(": "))+2:]))
	// With a LINSTOR controller, so that the LINSTOR gate is rendered too.
	rendered, err := exec.Command(helm, "template", "nodewright", path, "--kube-version", "1.34.2",
		"--set", "linstor.url=https://linstor-controller.piraeus-datastore.svc:3371").CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm template %s: %w\n%s", path, err, rendered)
	}
	for _, digest := range []string{d.Image.Digest, d.CopyImage.Digest, d.LINSTOR.Gate.Image.Digest, d.Agent.Image.Digest} {
		if !bytes.Contains(rendered, []byte("@"+digest)) {
			return fmt.Errorf("%s does not render an image by digest %s", path, digest)
		}
	}
	fmt.Printf("%s: operator @%s, nodewright-copy @%s, nodewright-linstor-gate @%s, agent @%s\n", path, d.Image.Digest, d.CopyImage.Digest,
		d.LINSTOR.Gate.Image.Digest, d.Agent.Image.Digest)
	return nil
}

// setDigests sets <key>.digest for each key of the values document (dots for nesting, as in
// agent.image), keeping its comments.
func setDigests(values []byte, digests map[string]string) ([]byte, error) {
	var doc goyaml.Node
	if err := goyaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != goyaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != goyaml.MappingNode {
		return nil, errors.New("not a mapping")
	}
	for _, key := range slices.Sorted(maps.Keys(digests)) {
		digest := digests[key]
		img := doc.Content[0]
		for _, part := range strings.Split(key, ".") {
			if img = child(img, part); img == nil || img.Kind != goyaml.MappingNode {
				return nil, fmt.Errorf("no %s mapping", key)
			}
		}
		v := child(img, "digest")
		if v == nil {
			return nil, fmt.Errorf("no %s.digest", key)
		}
		v.Value, v.Tag, v.Style = digest, "!!str", 0
	}
	var buf bytes.Buffer
	enc := goyaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// child is the value of key in mapping m.
func child(m *goyaml.Node, key string) *goyaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// copyTree copies the regular files of src into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
