package audit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFileHelpers(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pub, err := MarshalPublicKey(testSigner(t).PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	lines := buildChain(t, 3, 0)
	keyFile := write("audit.pub", pub)
	badKey := write("bad.pub", []byte("not a key"))
	checkpoint := write("checkpoint", append([]byte("\n  "), lines[len(lines)-1]...))
	record := write("record", lines[0])
	chain2 := write("trail/audit-0002.jsonl", nil)
	chain1 := write("trail/audit-0001.jsonl", nil)
	write("trail/other.txt", nil)
	single := write("single.jsonl", nil)
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name string
		run  func() (int, error)
		n    int
		err  string
	}{
		{"keys", func() (int, error) { k, err := ReadPublicKeys([]string{keyFile, keyFile}); return len(k), err }, 2, ""},
		{"no keys", func() (int, error) { k, err := ReadPublicKeys(nil); return len(k), err }, 0, ""},
		{"missing key", func() (int, error) { _, err := ReadPublicKeys([]string{missing}); return 0, err }, 0, "reading the public key"},
		{"bad key", func() (int, error) { _, err := ReadPublicKeys([]string{keyFile, badKey}); return 0, err }, 0, badKey + ": "},
		{"checkpoint", func() (int, error) {
			cp, err := ReadTrustedCheckpoint(checkpoint)
			if cp == nil {
				return 0, err
			}
			return int(cp.Size), err
		}, len(lines) - 1, ""},
		{"record as checkpoint", func() (int, error) { _, err := ReadTrustedCheckpoint(record); return 0, err }, 0, "the line is a record, not a checkpoint"},
		{"not a line", func() (int, error) { _, err := ReadTrustedCheckpoint(keyFile); return 0, err }, 0, "trusted checkpoint " + keyFile},
		{"missing checkpoint", func() (int, error) { _, err := ReadTrustedCheckpoint(missing); return 0, err }, 0, "reading the trusted checkpoint"},
		{"expand", func() (int, error) {
			files, err := ExpandChainFiles([]string{single, filepath.Join(dir, "trail")})
			if want := []string{single, chain1, chain2}; err == nil && !slices.Equal(files, want) {
				t.Errorf("files %q, want %q", files, want)
			}
			return len(files), err
		}, 3, ""},
		{"empty directory", func() (int, error) { _, err := ExpandChainFiles([]string{filepath.Join(dir, "empty")}); return 0, err }, 0, "no audit-*.jsonl files"},
		{"missing file", func() (int, error) { _, err := ExpandChainFiles([]string{missing}); return 0, err }, 0, "audit file: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := tc.run()
			if tc.err == "" {
				if err != nil || n != tc.n {
					t.Errorf("got %d, %v; want %d, no error", n, err, tc.n)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
