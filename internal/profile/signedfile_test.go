package profile

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestSetSignature(t *testing.T) {
	sig := bytes.Repeat([]byte{0xab}, 70)
	b64 := base64.StdEncoding.EncodeToString(sig)
	old := base64.StdEncoding.EncodeToString([]byte("an old signature"))
	asJSON, err := yaml.YAMLToJSON([]byte(testProfileYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"added at the end", testProfileYAML, testProfileYAML + "signature: " + b64 + "\n"},
		{"added without a final newline", strings.TrimSuffix(testProfileYAML, "\n"), testProfileYAML + "signature: " + b64 + "\n"},
		{"replaced in place",
			strings.Replace(testProfileYAML, "spec:\n", "signature: "+old+"\nspec:\n", 1),
			strings.Replace(testProfileYAML, "spec:\n", "signature: "+b64+"\nspec:\n", 1)},
		{"replaced, a literal block value",
			strings.Replace(testProfileYAML, "spec:\n", "signature: |-\n  "+old[:8]+"\n  "+old[8:]+"\n\nspec:\n", 1),
			strings.Replace(testProfileYAML, "spec:\n", "signature: "+b64+"\n\nspec:\n", 1)},
		{"added before a final document marker and comment",
			testProfileYAML + "...\n# the end\n",
			testProfileYAML + "signature: " + b64 + "\n...\n# the end\n"},
		{"added before trailing comments and blank lines",
			testProfileYAML + "\n# reviewed by ops\n",
			testProfileYAML + "signature: " + b64 + "\n\n# reviewed by ops\n"},
		{"CRLF line ends", strings.ReplaceAll(testProfileYAML, "\n", "\r\n"),
			strings.ReplaceAll(testProfileYAML, "\n", "\r\n") + "signature: " + b64 + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetSignature([]byte(tc.file), sig)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}

	// A JSON file is written out again as YAML, and reads back as the same profile.
	for _, file := range [][]byte{asJSON, []byte(strings.Replace(testProfileYAML, "storage:\n    backend: LINSTOR\n    storageClassName: linstor-r2", "storage: {backend: LINSTOR,\n    storageClassName: linstor-r2}", 1))} {
		got, err := SetSignature(file, sig)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Decode(got)
		if err != nil {
			t.Fatalf("%v\n%s", err, got)
		}
		if !bytes.Equal(p.Signature, sig) || string(mustCanonical(t, p.Spec)) != goldenFull || p.Name != "store-munich" {
			t.Errorf("written out as:\n%s", got)
		}
		if bytes.Contains(got, []byte("creationTimestamp")) || bytes.Contains(got, []byte("status")) {
			t.Errorf("empty fields written out:\n%s", got)
		}
	}

	// Signing twice leaves one signature.
	once, _ := SetSignature([]byte(testProfileYAML), []byte("first"))
	twice, err := SetSignature(once, sig)
	if err != nil || string(twice) != testProfileYAML+"signature: "+b64+"\n" {
		t.Errorf("signed twice:\n%s (%v)", twice, err)
	}

	if _, err := SetSignature([]byte("kind: ConfigMap\n"), sig); err == nil {
		t.Error("signed a file that is not a profile")
	}
}
