// Command images builds the OCI image archives of the binaries that run in a cluster
// (operator, nodewright-copy, nodewright-linstor-gate, agent, and the fleet hub nodewright-fleet)
// without a container engine, reproducibly; `make images` runs it. For each platform it compiles the binaries itself:
//
//	CGO_ENABLED=0 GOOS=<os> GOARCH=<arch> go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' ...
//
// then writes, in -out:
//
//	<name>.oci.tar   a tar of an OCI image layout holding one image index, one image per platform
//	digests.yaml     the index digests, as the nodewright chart's Helm values (image.digest,
//	                 copyImage.digest, linstor.gate.image.digest, agent.image.digest)
//	fleet-digests.yaml  the fleet hub's, as the nodewright-fleet chart's (image.digest): one
//	                 file cannot serve both charts, whose schemas refuse each other's keys
//	                 and which both name their main image `image`
//
// The agent's image also carries Debian's drbd-utils and the C library it needs, from .deb
// files pinned by version and SHA-256 (debian.go), downloaded once with apt-get into
// -deb-cache.
//
// and prints one line per image: name, platforms, digest, size. See docs/images.md.
//
// Usage:
//
//	go run ./hack/images [-out bin/images] [-platforms linux/amd64,linux/arm64]
//	    [-version V] [-revision R] [-epoch SECONDS] [-deb-cache bin/debian]
//
// -version defaults to `git describe --tags --always --dirty` ("dev" outside git),
// -revision to `git rev-parse HEAD` ("unknown" outside git), and -epoch, the time stamped on
// everything (file mtimes, created), to $SOURCE_DATE_EPOCH, else the last commit's time,
// else 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spectrocloud/nodewright/internal/ociimage"
)

// image is one image this command builds.
type image struct {
	name        string // image and binary name
	pkg         string // the main package, relative to the module root
	description string
	valuesKey   string // its key in its values file: <valuesKey>.digest, dots for nesting
	// valuesFile is the file of -out its digest is written to: its chart's values; empty is
	// digests.yaml (the nodewright chart's).
	valuesFile string
	// drbdUtils: the image also carries Debian's drbd-utils (debian.go).
	drbdUtils bool
}

// images are the binaries that run in a cluster.
var images = []image{
	{
		name:        "operator",
		pkg:         "./cmd/operator",
		description: "Nodewright operator: the controller manager for the Nodewright custom resources, with its admission webhooks.",
		valuesKey:   "image",
	},
	{
		name:        "nodewright-copy",
		pkg:         "./cmd/nodewright-copy",
		description: "nodewright-copy: copies a block device to another and proves the copy identical; run by the volume migration Jobs.",
		valuesKey:   "copyImage",
	},
	{
		name:        "nodewright-linstor-gate",
		pkg:         "./cmd/nodewright-linstor-gate",
		description: "Nodewright LINSTOR gate: holds LINSTOR's client certificate and forwards to LINSTOR only what a replication upgrade asks of it, for the operator alone.",
		valuesKey:   "linstor.gate.image",
	},
	{
		name:        "agent",
		pkg:         "./cmd/agent",
		description: "Nodewright node agent: keeps its node's heartbeat and performs the node's operations (bond mode under a checkpoint, DRBD through drbd-utils, which the image carries).",
		valuesKey:   "agent.image",
		drbdUtils:   true,
	},
	{
		name:        "nodewright-fleet",
		pkg:         "./cmd/nodewright-fleet",
		description: "Nodewright fleet hub: one NodewrightClusterSummary per member cluster, read-only on the members.",
		valuesKey:   "image",
		valuesFile:  fleetDigests,
	},
}

// The values files of the charts (digests.yaml: charts/nodewright; fleet-digests.yaml:
// charts/nodewright-fleet).
const (
	memberDigests = "digests.yaml"
	fleetDigests  = "fleet-digests.yaml"
)

// file is the values file img's digest goes to.
func (img image) file() string {
	if img.valuesFile == "" {
		return memberDigests
	}
	return img.valuesFile
}

// config is what one run does.
type config struct {
	out       string
	platforms []string
	version   string
	revision  string
	epoch     time.Time
	images    []image
	moduleDir string // where go build runs; "" is the working directory
	debCache  string // where the Debian packages are kept
}

const defaultPlatforms = "linux/amd64,linux/arm64"

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv, gitOutput)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// parseFlags reads the flags; getenv and git supply the defaults.
func parseFlags(args []string, getenv func(string) string, git func(args ...string) (string, error)) (config, error) {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	out := fs.String("out", "bin/images", "directory for the archives and digests.yaml")
	platforms := fs.String("platforms", defaultPlatforms, "platforms to build, os/arch, separated by commas or spaces")
	version := fs.String("version", "", "org.opencontainers.image.version (default: git describe --tags --always --dirty)")
	revision := fs.String("revision", "", "org.opencontainers.image.revision (default: git rev-parse HEAD)")
	epoch := fs.String("epoch", "", "Unix time stamped on everything (default: $SOURCE_DATE_EPOCH, else the last commit's time, else 0)")
	debCache := fs.String("deb-cache", "bin/debian", "directory for the pinned Debian packages of the agent's image (downloaded once)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := config{out: *out, version: *version, revision: *revision, images: images, debCache: *debCache}
	if cfg.out == "" {
		return config{}, errors.New("-out: empty")
	}

	for _, p := range strings.FieldsFunc(*platforms, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		pl, err := ociimage.ParsePlatform(p)
		if err != nil {
			return config{}, fmt.Errorf("-platforms: %w", err)
		}
		if pl.Variant != "" {
			return config{}, fmt.Errorf("-platforms: platform %q: variants are not supported, use os/arch", p)
		}
		for _, seen := range cfg.platforms {
			if seen == p {
				return config{}, fmt.Errorf("-platforms: %s listed twice", p)
			}
		}
		cfg.platforms = append(cfg.platforms, p)
	}
	if len(cfg.platforms) == 0 {
		return config{}, errors.New("-platforms: empty")
	}

	if cfg.version == "" {
		v, err := git("describe", "--tags", "--always", "--dirty")
		if err != nil || v == "" {
			v = "dev"
		}
		cfg.version = v
	}
	if cfg.revision == "" {
		r, err := git("rev-parse", "HEAD")
		if err != nil || r == "" {
			r = "unknown"
		}
		cfg.revision = r
	}

	e, source := *epoch, "-epoch"
	if e == "" {
		e, source = getenv("SOURCE_DATE_EPOCH"), "SOURCE_DATE_EPOCH"
	}
	if e == "" {
		if t, err := git("log", "-1", "--format=%ct"); err == nil && t != "" {
			e, source = t, "the last commit's time"
		} else {
			e = "0"
		}
	}
	secs, err := strconv.ParseInt(e, 10, 64)
	if err != nil || secs < 0 {
		return config{}, fmt.Errorf("%s %q: want a non-negative Unix time in seconds", source, e)
	}
	cfg.epoch = time.Unix(secs, 0).UTC()
	return cfg, nil
}

// gitOutput runs git with args and returns its trimmed standard output.
func gitOutput(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// result is one image written.
type result struct {
	name, digest, path string
	size               int64
}

// run compiles the binaries, writes the archives and digests.yaml, and prints a line per image.
func run(ctx context.Context, cfg config, stdout io.Writer) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	buildDir, err := os.MkdirTemp("", "nodewright-images-")
	if err != nil {
		return fmt.Errorf("build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(buildDir) }()

	// binaries[platform] is the directory with that platform's binaries.
	binaries := map[string]string{}
	for _, p := range cfg.platforms {
		dir := filepath.Join(buildDir, strings.ReplaceAll(p, "/", "_"))
		if err := goBuild(ctx, cfg, p, dir); err != nil {
			return err
		}
		binaries[p] = dir
	}

	var results []result
	for _, img := range cfg.images {
		spec := ociimage.Spec{
			Name:        img.name,
			Description: img.description,
			Version:     cfg.version,
			Revision:    cfg.revision,
			Epoch:       cfg.epoch,
		}
		for _, p := range cfg.platforms {
			b := ociimage.Binary{Platform: p, Path: filepath.Join(binaries[p], img.name)}
			if img.drbdUtils {
				if b.Files, err = debianFiles(ctx, cfg.debCache, p); err != nil {
					return fmt.Errorf("%s for %s: drbd-utils: %w", img.name, p, err)
				}
				spec.Licenses = drbdLicenses
			}
			spec.Binaries = append(spec.Binaries, b)
		}
		r, err := writeImage(cfg, spec)
		if err != nil {
			return err
		}
		results = append(results, r)
	}

	var files []string
	for _, img := range cfg.images {
		if !slices.Contains(files, img.file()) {
			files = append(files, img.file())
		}
	}
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(cfg.out, f), []byte(digestsYAML(f, cfg.images, results))); err != nil {
			return fmt.Errorf("digests: %w", err)
		}
	}
	for _, r := range results {
		_, _ = fmt.Fprintf(stdout, "%-16s %s  %s  %s  %s\n", r.name, strings.Join(cfg.platforms, ","), r.digest, humanSize(r.size), r.path)
	}
	for _, f := range files {
		_, _ = fmt.Fprintf(stdout, "%-16s %s\n", "digests", filepath.Join(cfg.out, f))
	}
	return nil
}

// goBuild compiles every image's package for platform into dir.
func goBuild(ctx context.Context, cfg config, platform, dir string) error {
	pl, err := ociimage.ParsePlatform(platform)
	if err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", dir + string(filepath.Separator)}
	for _, img := range cfg.images {
		args = append(args, img.pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = cfg.moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+pl.OS, "GOARCH="+pl.Architecture)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", platform, err)
	}
	return nil
}

// writeImage builds spec's index and writes <out>/<name>.oci.tar.
func writeImage(cfg config, spec ociimage.Spec) (result, error) {
	idx, err := ociimage.BuildIndex(spec)
	if err != nil {
		return result{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return result{}, fmt.Errorf("%s: index digest: %w", spec.Name, err)
	}
	path := filepath.Join(cfg.out, spec.Name+".oci.tar")
	tmp, err := os.CreateTemp(cfg.out, "."+spec.Name+".oci.tar-")
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", spec.Name, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := ociimage.WriteArchive(tmp, idx, cfg.version, cfg.epoch); err != nil {
		_ = tmp.Close()
		return result{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return result{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return result{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return result{}, fmt.Errorf("%s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", path, err)
	}
	return result{name: spec.Name, digest: digest.String(), path: path, size: st.Size()}, nil
}

// digestsYAML is the Helm values fragment of file: the index digest of each image whose
// digest goes there.
func digestsYAML(file string, imgs []image, results []result) string {
	var b strings.Builder
	b.WriteString("# Written by `make images` (hack/images): the image index digests of the archives\n")
	fmt.Fprintf(&b, "# beside this file. Use with: helm install ... -f bin/images/%s\n", file)
	for i, img := range imgs {
		if img.file() != file {
			continue
		}
		indent := ""
		for _, key := range strings.Split(img.valuesKey, ".") {
			fmt.Fprintf(&b, "%s%s:\n", indent, key)
			indent += "  "
		}
		fmt.Fprintf(&b, "%sdigest: %s\n", indent, results[i].digest)
	}
	return b.String()
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func humanSize(n int64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}
