package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/ociimage"
)

func fakeGit(out map[string]string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		if v, ok := out[strings.Join(args, " ")]; ok {
			return v, nil
		}
		return "", errors.New("not a git repository")
	}
}

var inGit = fakeGit(map[string]string{
	"describe --tags --always --dirty": "v0.3.0-2-g1234567-dirty",
	"rev-parse HEAD":                   "1234567890abcdef1234567890abcdef12345678",
	"log -1 --format=%ct":              "1700000000",
})

func noEnv(string) string { return "" }

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, noEnv, inGit)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.out != "bin/images" || strings.Join(cfg.platforms, ",") != "linux/amd64,linux/arm64" ||
		cfg.version != "v0.3.0-2-g1234567-dirty" || cfg.revision != "1234567890abcdef1234567890abcdef12345678" ||
		!cfg.epoch.Equal(time.Unix(1700000000, 0)) || len(cfg.images) != 5 {
		t.Fatalf("defaults: %+v", cfg)
	}

	// SOURCE_DATE_EPOCH wins over the commit time, -epoch over both.
	env := func(k string) string {
		if k == "SOURCE_DATE_EPOCH" {
			return "1600000000"
		}
		return ""
	}
	if cfg, err = parseFlags(nil, env, inGit); err != nil || cfg.epoch.Unix() != 1600000000 {
		t.Fatalf("SOURCE_DATE_EPOCH: %v %v", cfg.epoch, err)
	}
	if cfg, err = parseFlags([]string{"-epoch", "5"}, env, inGit); err != nil || cfg.epoch.Unix() != 5 {
		t.Fatalf("-epoch: %v %v", cfg.epoch, err)
	}

	// Outside git.
	cfg, err = parseFlags([]string{"-platforms", "linux/arm64"}, noEnv, fakeGit(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.version != "dev" || cfg.revision != "unknown" || cfg.epoch.Unix() != 0 || strings.Join(cfg.platforms, ",") != "linux/arm64" {
		t.Fatalf("outside git: %+v", cfg)
	}
	// Spaces separate too (PLATFORMS="linux/amd64 linux/arm64").
	if cfg, err = parseFlags([]string{"-platforms", "linux/amd64 linux/arm64"}, noEnv, inGit); err != nil || len(cfg.platforms) != 2 {
		t.Fatalf("space-separated platforms: %v %v", cfg.platforms, err)
	}
}

func TestParseFlagsBad(t *testing.T) {
	badEnv := func(k string) string {
		if k == "SOURCE_DATE_EPOCH" {
			return "yesterday"
		}
		return ""
	}
	for _, tc := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{[]string{"-platforms", "linux"}, noEnv, `-platforms: platform "linux": want os/arch`},
		{[]string{"-platforms", ""}, noEnv, "-platforms: empty"},
		{[]string{"-platforms", "linux/arm/v7"}, noEnv, "variants are not supported"},
		{[]string{"-platforms", "linux/amd64,linux/amd64"}, noEnv, "linux/amd64 listed twice"},
		{[]string{"-epoch", "-1"}, noEnv, `-epoch "-1"`},
		{nil, badEnv, `SOURCE_DATE_EPOCH "yesterday"`},
		{[]string{"-out", ""}, noEnv, "-out: empty"},
		{[]string{"extra"}, noEnv, "unexpected arguments"},
	} {
		_, err := parseFlags(tc.args, tc.env, inGit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// TestRun builds two tiny programs into images, twice, the second with drbd-utils as the
// agent's, and checks the two runs agree byte for byte.
func TestRun(t *testing.T) {
	mod := t.TempDir()
	write := func(name, data string) {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module tiny\n\ngo 1.22\n")
	write("hello/main.go", "package main\n\nfunc main() { println(\"hello\") }\n")
	write("bye/main.go", "package main\n\nfunc main() { println(\"bye\") }\n")
	write("hub/main.go", "package main\n\nfunc main() { println(\"hub\") }\n")
	t.Setenv("GOWORK", "off")

	base := config{
		platforms: []string{"linux/amd64"},
		version:   "v9.9.9",
		revision:  "0123456789012345678901234567890123456789",
		epoch:     time.Unix(1700000000, 0).UTC(),
		images: []image{
			{name: "hello", pkg: "./hello", description: "says hello", valuesKey: "image"},
			{name: "bye", pkg: "./bye", description: "says bye", valuesKey: "agent.image", drbdUtils: true},
			// Another chart's image: its own values file.
			{name: "hub", pkg: "./hub", description: "says hub", valuesKey: "image", valuesFile: fleetDigests},
		},
		moduleDir: mod,
		debCache:  debCache(t),
	}
	outputs := make([]string, 2)
	dirs := make([]string, 2)
	for i := range dirs {
		cfg := base
		cfg.out = filepath.Join(t.TempDir(), "images")
		dirs[i] = cfg.out
		var stdout bytes.Buffer
		if err := run(context.Background(), cfg, &stdout); err != nil {
			t.Fatal(err)
		}
		outputs[i] = strings.ReplaceAll(stdout.String(), cfg.out, "OUT")
	}
	if outputs[0] != outputs[1] {
		t.Errorf("two runs printed differently:\n%s\n%s", outputs[0], outputs[1])
	}
	line := regexp.MustCompile(`(?m)^hello +linux/amd64  sha256:[0-9a-f]{64}  [0-9.]+ MiB \([0-9]+ bytes\)  OUT/hello\.oci\.tar$`)
	if !line.MatchString(outputs[0]) {
		t.Errorf("output has no line for hello:\n%s", outputs[0])
	}

	for _, name := range []string{"hello.oci.tar", "bye.oci.tar", "hub.oci.tar", "digests.yaml", "fleet-digests.yaml"} {
		a, err := os.ReadFile(filepath.Join(dirs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dirs[1], name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	digests, err := os.ReadFile(filepath.Join(dirs[0], "digests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := regexp.MustCompile(`(?m)^image:\n  digest: sha256:[0-9a-f]{64}\nagent:\n  image:\n    digest: sha256:[0-9a-f]{64}\n\z`)
	if !yaml.Match(digests) {
		t.Errorf("digests.yaml:\n%s", digests)
	}
	for _, name := range []string{"hello", "bye"} {
		if !strings.Contains(string(digests), digestOf(t, outputs[0], name)) {
			t.Errorf("digests.yaml does not have %s's printed digest:\n%s", name, digests)
		}
	}
	fleet, err := os.ReadFile(filepath.Join(dirs[0], fleetDigests))
	if err != nil {
		t.Fatal(err)
	}
	if want := "image:\n  digest: " + digestOf(t, outputs[0], "hub") + "\n"; !strings.HasSuffix(string(fleet), want) || strings.Count(string(fleet), "digest: ") != 1 {
		t.Errorf("fleet-digests.yaml:\n%s\nwant it to end with, and hold only:\n%s", fleet, want)
	}
	entries, err := os.ReadDir(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 {
		t.Errorf("output directory has %d entries, want the 3 archives, digests.yaml and fleet-digests.yaml (no temporary files)", len(entries))
	}
}

func TestRunBuildFailure(t *testing.T) {
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module tiny\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOWORK", "off")
	cfg := config{out: t.TempDir(), platforms: []string{"linux/amd64"}, version: "v", revision: "r",
		images: []image{{name: "missing", pkg: "./missing", valuesKey: "image"}}, moduleDir: mod}
	err := run(context.Background(), cfg, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "go build for linux/amd64") {
		t.Fatalf("error %v, want one naming the go build", err)
	}
}

func digestOf(t *testing.T, output, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` .*(sha256:[0-9a-f]{64})`).FindStringSubmatch(output)
	if m == nil {
		t.Fatalf("no digest for %s in:\n%s", name, output)
	}
	return m[1]
}

// TestCopierPathIsWhereTheImagePutsIt: the copy Jobs run nodewright-copy by the path the
// chart's admission policy admits (migration.CopierPath); the image must put it there.
func TestCopierPathIsWhereTheImagePutsIt(t *testing.T) {
	if got := ociimage.BinaryPath("nodewright-copy"); got != migration.CopierPath {
		t.Fatalf("the copier image holds nodewright-copy at %s; the copy Jobs run %s", got, migration.CopierPath)
	}
}
