// Command chartpackage packages a chart with the digests of the images `make images` built,
// so that the packaged chart references them by digest:
//
//	go run ./hack/chartpackage -helm bin/tools/helm-<version> -digests bin/images/digests.yaml -out bin/charts
//	go run ./hack/chartpackage -helm bin/tools/helm-<version> -chart charts/nodewright-fleet -digests bin/images/fleet-digests.yaml -out bin/charts
//
// It copies the chart, sets the digest of each of its images in the copy's values.yaml
// (comments kept): for charts/nodewright image.digest, copyImage.digest,
// linstor.gate.image.digest and agent.image.digest; for charts/nodewright-fleet image.digest.
// It then packages the copy with helm, and checks that the package renders every image by
// digest (the LINSTOR gate's with a linstor.url).
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
	digests := flag.String("digests", "bin/images/digests.yaml", "the digests `make images` wrote for this chart")
	out := flag.String("out", "bin/charts", "folder the package is written to")
	helm := flag.String("helm", "helm", "the helm binary")
	flag.Parse()
	if err := run(*chart, *digests, *out, *helm); err != nil {
		fmt.Fprintln(os.Stderr, "chartpackage:", err)
		os.Exit(1)
	}
}

// chartImages is what a chart's package gets: the values keys of its images (each
// <key>.digest), with the image each names, and the helm template arguments under which
// every one of them is rendered.
type chartImages struct {
	images   []chartImage
	template []string
}

type chartImage struct{ key, name string }

// charts are the charts this packages, by their folder's name.
var charts = map[string]chartImages{
	"nodewright": {
		images: []chartImage{{"image", "operator"}, {"copyImage", "nodewright-copy"}, {"linstor.gate.image", "nodewright-linstor-gate"}, {"agent.image", "agent"}},
		// With a LINSTOR controller, so that the LINSTOR gate is rendered too.
		template: []string{"--set", "linstor.url=https://linstor-controller.piraeus-datastore.svc:3371"},
	},
	"nodewright-fleet": {images: []chartImage{{"image", "nodewright-fleet"}}},
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// readDigests reads <key>.digest of each image from the digests file, which must hold those
// and nothing else.
func readDigests(data []byte, images []chartImage) (map[string]string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	found := map[string]string{}
	var walk func(prefix string, m map[string]any) error
	walk = func(prefix string, m map[string]any) error {
		for k, v := range m {
			switch v := v.(type) {
			case map[string]any:
				if err := walk(prefix+k+".", v); err != nil {
					return err
				}
			case string:
				if k != "digest" {
					return fmt.Errorf("%s%s: not a digest", prefix, k)
				}
				found[strings.TrimSuffix(prefix, ".")] = v
			default:
				return fmt.Errorf("%s%s: not a digest", prefix, k)
			}
		}
		return nil
	}
	if err := walk("", doc); err != nil {
		return nil, err
	}
	digests := map[string]string{}
	for _, img := range images {
		v, ok := found[img.key]
		if !ok {
			return nil, fmt.Errorf("no %s.digest (%s's)", img.key, img.name)
		}
		if !digestRE.MatchString(v) {
			return nil, fmt.Errorf("%s.digest %q is not a sha256 digest", img.key, v)
		}
		digests[img.key] = v
		delete(found, img.key)
	}
	if len(found) > 0 {
		return nil, fmt.Errorf("digests of images this chart does not have: %s", strings.Join(slices.Sorted(maps.Keys(found)), ", "))
	}
	return digests, nil
}

func run(chart, digestsFile, out, helm string) error {
	spec, ok := charts[filepath.Base(filepath.Clean(chart))]
	if !ok {
		return fmt.Errorf("-chart %s: not a chart this packages (%s)", chart, strings.Join(slices.Sorted(maps.Keys(charts)), ", "))
	}
	data, err := os.ReadFile(digestsFile)
	if err != nil {
		return fmt.Errorf("%w (run make images first)", err)
	}
	digests, err := readDigests(data, spec.images)
	if err != nil {
		return fmt.Errorf("%s: %w", digestsFile, err)
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
	rendered, err := exec.Command(helm, append([]string{"template", filepath.Base(chart), path, "--kube-version", "1.34.2"}, spec.template...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm template %s: %w\n%s", path, err, rendered)
	}
	var said []string
	for _, img := range spec.images {
		if !bytes.Contains(rendered, []byte("@"+digests[img.key])) {
			return fmt.Errorf("%s does not render %s's image by digest %s", path, img.name, digests[img.key])
		}
		said = append(said, img.name+" @"+digests[img.key])
	}
	fmt.Printf("%s: %s\n", path, strings.Join(said, ", "))
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
