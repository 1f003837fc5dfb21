package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/profile/profilecli"
)

const munich = `# The Munich store.
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: EdgeProfile
metadata:
  name: store-munich
spec:
  version: 1.4.0
  topology: TwoNodeTiebreaker
  storage:
    backend: LINSTOR
  os: Kairos
  network:
    bondInterface: bond0
    bondMode: "802.3ad"   # LACP
    storageVLAN: 120
`

const munichCanonical = `{"network":{"bondInterface":"bond0","bondMode":"802.3ad","storageVLAN":120},"os":"Kairos",` +
	`"storage":{"backend":"LINSTOR"},"thresholds":{"drbdSyncTimeout":"6h0m0s","heartbeatStaleAfter":"30s"},` +
	`"topology":"TwoNodeTiebreaker","version":"1.4.0"}`

type result struct {
	code           int
	stdout, stderr string
}

// nwp runs the command, in the test's working directory (t.Chdir), with the given environment
// variables.
func nwp(t *testing.T, vars map[string]string, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := profilecli.Env{
		Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
	}
	return result{run(args, env), stdout.String(), stderr.String()}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	pw := map[string]string{"NODEWRIGHT_PROFILE_PASSWORD": "pw"}
	write(t, dir, "munich.yaml", munich)

	if r := nwp(t, nil, "", "keygen"); r.code != 2 || !strings.Contains(r.stderr, "set NODEWRIGHT_PROFILE_PASSWORD (or COSIGN_PASSWORD)") {
		t.Fatalf("keygen without a password: %+v", r)
	}
	if r := nwp(t, pw, "", "keygen", "--output-key-prefix", "site"); r.code != 0 ||
		r.stderr != "Private key written to site.key\nPublic key written to site.pub\n" {
		t.Fatalf("keygen: %+v", r)
	}
	if info, err := os.Stat(filepath.Join(dir, "site.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("site.key: %v, %v", info.Mode(), err)
	}
	if r := nwp(t, pw, "", "keygen", "--output-key-prefix", "site"); r.code != 2 || !strings.Contains(r.stderr, "site.key already exists") {
		t.Fatalf("keygen over existing keys: %+v", r)
	}
	// COSIGN_PASSWORD works too, and an empty password is a password.
	if r := nwp(t, map[string]string{"COSIGN_PASSWORD": ""}, "", "keygen"); r.code != 0 {
		t.Fatalf("keygen with an empty COSIGN_PASSWORD: %+v", r)
	}

	if r := nwp(t, nil, "", "canonical", "munich.yaml"); r.code != 0 || r.stdout != munichCanonical {
		t.Errorf("canonical: %+v", r)
	}
	if r := nwp(t, nil, munich, "digest", "-"); r.code != 0 || !strings.HasPrefix(r.stdout, "sha256:") || len(r.stdout) != 72 {
		t.Errorf("digest of standard input: %+v", r)
	}

	if r := nwp(t, nil, "", "sign", "--key", "site.key", "munich.yaml"); r.code != 2 || !strings.Contains(r.stderr, "site.key is encrypted: set NODEWRIGHT_PROFILE_PASSWORD") {
		t.Errorf("sign without a password: %+v", r)
	}
	if r := nwp(t, map[string]string{"NODEWRIGHT_PROFILE_PASSWORD": "no"}, "", "sign", "--key", "site.key", "munich.yaml"); r.code != 1 || !strings.Contains(r.stderr, "wrong password") {
		t.Errorf("sign with a wrong password: %+v", r)
	}
	signed := nwp(t, pw, "", "sign", "--key", "site.key", "munich.yaml")
	if signed.code != 0 || !strings.HasPrefix(signed.stdout, munich+"signature: ") {
		t.Fatalf("sign: %+v", signed)
	}
	write(t, dir, "signed.yaml", signed.stdout)
	if r := nwp(t, nil, "", "verify", "--key", "site.pub", "signed.yaml"); r.code != 0 || !strings.HasPrefix(r.stdout, "Verified OK: signed.yaml (spec.version 1.4.0, sha256:") ||
		!strings.HasSuffix(r.stdout, "(site.pub)\n") {
		t.Errorf("verify: %+v", r)
	}
	// Flags after the file, and several keys, one of them not the signer.
	if r := nwp(t, nil, "", "verify", "signed.yaml", "--key", "cosign.pub", "--key", "site.pub"); r.code != 0 {
		t.Errorf("verify with the flags last: %+v", r)
	}

	// -w rewrites the file in place, keeping its permissions.
	write(t, dir, "rewrite.yaml", munich)
	if err := os.Chmod(filepath.Join(dir, "rewrite.yaml"), 0o640); err != nil {
		t.Fatal(err)
	}
	if r := nwp(t, pw, "", "sign", "-w", "--key", "site.key", "rewrite.yaml"); r.code != 0 || r.stdout != "" || !strings.HasPrefix(r.stderr, "Signed rewrite.yaml") {
		t.Fatalf("sign -w: %+v", r)
	}
	if info, err := os.Stat(filepath.Join(dir, "rewrite.yaml")); err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("rewrite.yaml: %v, %v", info.Mode(), err)
	}
	if r := nwp(t, nil, "", "verify", "--key", "site.pub", "rewrite.yaml"); r.code != 0 {
		t.Errorf("verify the rewritten file: %+v", r)
	}

	// Invalid: exit 1, with the reason.
	write(t, dir, "tampered.yaml", strings.Replace(signed.stdout, "storageVLAN: 120", "storageVLAN: 121", 1))
	write(t, dir, "broken.yaml", strings.Replace(signed.stdout, "storageVLAN: 120", "storageVLAN: 5000", 1))
	write(t, dir, "broken2.yaml", strings.NewReplacer("storageVLAN: 120", "storageVLAN: 5000", "os: Kairos", "os: Win").Replace(signed.stdout))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--key", "site.pub", "munich.yaml"}, "munich.yaml: signature: the profile is not signed (signature is empty)"},
		{[]string{"verify", "--key", "site.pub", "tampered.yaml"}, "tampered.yaml: signature: the signature does not verify"},
		{[]string{"verify", "--key", "cosign.pub", "signed.yaml"}, "signed.yaml: signature: the signature does not verify"},
		{[]string{"verify", "--key", "site.pub", "broken.yaml"}, "broken.yaml: spec.network.storageVLAN: must be between 1 and 4094, got 5000"},
		{[]string{"canonical", "broken.yaml"}, "spec.network.storageVLAN: must be between 1 and 4094, got 5000"},
		{[]string{"sign", "--key", "site.key", "broken2.yaml"}, "nodewright-profile sign: broken2.yaml:\n" +
			`  spec.os: "Win" is not one of Kairos, SystemdNetworkd, Talos` + "\n" +
			"  spec.network.storageVLAN: must be between 1 and 4094, got 5000\n"},
	} {
		if r := nwp(t, pw, "", tc.args...); r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: %+v\nwant %s", strings.Join(tc.args, " "), r, tc.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	write(t, dir, "munich.yaml", munich)
	write(t, dir, "not-a-key.pub", "hello")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"verify", "munich.yaml"}, "--key is required"},
		{[]string{"verify", "--key", "missing.pub", "munich.yaml"}, "missing.pub: no such file"},
		{[]string{"verify", "--key", "not-a-key.pub", "munich.yaml"}, "not-a-key.pub: malformed key: no PEM block found"},
		{[]string{"verify", "--key", "not-a-key.pub"}, "want one FILE, got 0 arguments"},
		{[]string{"canonical", "a.yaml", "b.yaml"}, "want one FILE, got 2 arguments"},
		{[]string{"canonical", "missing.yaml"}, "missing.yaml: no such file"},
		{[]string{"sign", "munich.yaml"}, "--key is required"},
		{[]string{"sign", "--key", "k", "-w", "-"}, "cannot rewrite standard input"},
		{[]string{"sign", "--bogus", "munich.yaml"}, "flag provided but not defined: -bogus"},
		{[]string{"keygen", "extra"}, "unexpected arguments"},
	} {
		if r := nwp(t, nil, "", tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: %+v\nwant exit 2 and %s", tc.args, r, tc.want)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"sign", "--help"}, {"verify", "-h"}} {
		if r := nwp(t, nil, "", args...); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "usage:") {
			t.Errorf("%q: %+v", args, r)
		}
	}
}
