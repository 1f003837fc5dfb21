package profile

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The canonical encoding v1 of two specs, pinned byte for byte: signatures made today must verify
// forever, so these strings never change. (The digests were checked with sha256sum, and the
// bytes against Python's json.dumps(sort_keys=True, separators=(",", ":")), which is RFC 8785
// for ASCII text and integers.) A change to the encoding is a new version, not an edit here.
const (
	goldenFull = `{"legacy":{"configMapRef":{"name":"node-init-state","namespace":"kube-system"},` +
		`"daemonSetRef":{"name":"node-init","namespace":"kube-system"},"eventComponent":"node-init"},` +
		`"network":{"bondInterface":"bond0","bondMode":"802.3ad","memberInterfaces":["enp1s0","enp2s0"],"storageVLAN":120},` +
		`"os":"Kairos","storage":{"backend":"LINSTOR","storageClassName":"linstor-r2"},` +
		`"thresholds":{"drbdSyncTimeout":"1h30m0s","heartbeatStaleAfter":"45s"},` +
		`"topology":"TwoNodeTiebreaker","version":"1.4.0"}`
	goldenFullDigest = "sha256:56b6fa5f27bbf54ef54f519c4de9c06ba02195cbdf636d9e85a8aa08f8b31883"

	goldenMinimal = `{"network":{"bondInterface":"bond0","bondMode":"active-backup"},"os":"SystemdNetworkd",` +
		`"storage":{"backend":"TopoLVM"},"thresholds":{"drbdSyncTimeout":"6h0m0s","heartbeatStaleAfter":"30s"},` +
		`"topology":"SingleNode","version":"0.1.0"}`
	goldenMinimalDigest = "sha256:8e18efb55205a8fa80fd980f0f9a6ab4bfa12096a23f935ab78982e864133a49"
)

func TestCanonicalV1IsPinned(t *testing.T) {
	for _, tc := range []struct {
		name         string
		spec         v1alpha1.EdgeProfileSpec
		want, digest string
	}{
		{"every field", testSpec(), goldenFull, goldenFullDigest},
		{"required fields only, defaults applied", minimalSpec(), goldenMinimal, goldenMinimalDigest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(mustCanonical(t, tc.spec)); got != tc.want {
				t.Errorf("Canonical:\n got %s\nwant %s", got, tc.want)
			}
			if got, err := Digest(tc.spec); err != nil || got != tc.digest {
				t.Errorf("Digest = %s, %v; want %s", got, err, tc.digest)
			}
		})
	}
}

func TestCanonicalSameForEquivalentSpecs(t *testing.T) {
	withThresholds := func(hb, drbd time.Duration) v1alpha1.EdgeProfileSpec {
		s := minimalSpec()
		s.Thresholds.HeartbeatStaleAfter = metav1.Duration{Duration: hb}
		s.Thresholds.DRBDSyncTimeout = metav1.Duration{Duration: drbd}
		return s
	}
	withEmptyOptionals := minimalSpec()
	withEmptyOptionals.Network.MemberInterfaces = []string{}
	withEmptyOptionals.Storage.StorageClassName = ""

	withLINSTOR := func(l v1alpha1.ProfileLINSTOR) v1alpha1.EdgeProfileSpec {
		s := minimalSpec()
		s.Storage.LINSTOR = &l
		return s
	}
	url := "https://linstor-controller.piraeus-datastore.svc:3371"

	for _, tc := range []struct {
		name string
		a, b v1alpha1.EdgeProfileSpec
	}{
		{"absent thresholds are the CRD defaults", minimalSpec(), withThresholds(30*time.Second, 6*time.Hour)},
		{"absent LINSTOR policies are the CRD defaults", withLINSTOR(v1alpha1.ProfileLINSTOR{URL: url}),
			withLINSTOR(v1alpha1.ProfileLINSTOR{URL: url, Satellites: v1alpha1.SatellitesPiraeus, OnNoQuorum: v1alpha1.OnNoQuorumSuspendIO})},
		{"one threshold absent", withThresholds(0, 2*time.Hour), withThresholds(30*time.Second, 2*time.Hour)},
		{"an empty list is an absent list", minimalSpec(), withEmptyOptionals},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a, b := mustCanonical(t, tc.a), mustCanonical(t, tc.b); !bytes.Equal(a, b) {
				t.Errorf("different encodings:\n%s\n%s", a, b)
			}
		})
	}
}

// "1h30m" and "1h30m0s" are the same duration, read from a file either way.
func TestCanonicalDurationSpellings(t *testing.T) {
	var first []byte
	for _, spelling := range []string{"1h30m", "1h30m0s", "90m", "5400s", "1.5h"} {
		file := strings.Replace(testProfileYAML, "drbdSyncTimeout: 1h30m", "drbdSyncTimeout: "+spelling, 1)
		p, err := Decode([]byte(file))
		if err != nil {
			t.Fatalf("%s: %v", spelling, err)
		}
		got := mustCanonical(t, p.Spec)
		if first == nil {
			first = got
		} else if !bytes.Equal(got, first) {
			t.Errorf("%s encodes as %s, 1h30m as %s", spelling, got, first)
		}
	}
	if string(first) != goldenFull {
		t.Errorf("the file does not encode as testSpec:\n got %s\nwant %s", first, goldenFull)
	}
}

func TestCanonicalDoesNotChangeItsArgument(t *testing.T) {
	spec := minimalSpec()
	mustCanonical(t, spec)
	if spec.Thresholds.HeartbeatStaleAfter.Duration != 0 {
		t.Error("Canonical set a default in the caller's spec")
	}
}

func TestCanonicalRefusesInvalidUTF8(t *testing.T) {
	spec := testSpec()
	spec.Legacy.EventComponent = "node\xffinit"
	_, err := Canonical(spec)
	if err == nil || !strings.Contains(err.Error(), "spec.legacy.eventComponent") {
		t.Fatalf("got %v, want an error naming spec.legacy.eventComponent", err)
	}
}

// RFC 8785 section 3.2.2.2 and its test vectors for strings.
func TestJCSStrings(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{"quote\" backslash\\ slash/", `"quote\" backslash\\ slash/"`},
		{"\b\t\n\f\r", `"\b\t\n\f\r"`},
		{"\x00\x01\x1f\x7f", `"\u0000\u0001\u001f` + "\x7f" + `"`},
		{"<>&", `"<>&"`},                     // encoding/json would escape these
		{"\u2028\u2029", "\"\u2028\u2029\""}, // and these
		{"€$\U0001F600", "\"€$\U0001F600\""}, // non-ASCII as UTF-8, not escaped
		{"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"/", `"€$\u000f\nA'B\"\\\\\"/"`}, // RFC 8785 3.2.2.2
	} {
		var b bytes.Buffer
		writeJCSString(&b, tc.in)
		if b.String() != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, b.String(), tc.want)
		}
	}
}

// Keys sort by UTF-16 code units: a character above U+FFFF (a surrogate pair, 0xD8xx) sorts
// before U+E000..U+FFFF, although its UTF-8 bytes sort after them.
func TestJCSKeyOrder(t *testing.T) {
	tree := map[string]any{"\uFB33": json.Number("1"), "\U0001F600": json.Number("2"), "b": json.Number("3"), "a": json.Number("4"), "\u00e9": json.Number("5"), "B": json.Number("6")}
	var b bytes.Buffer
	if err := writeJCS(&b, tree); err != nil {
		t.Fatal(err)
	}
	want := "{\"B\":6,\"a\":4,\"b\":3,\"\u00e9\":5,\"\U0001F600\":2,\"\uFB33\":1}"
	if b.String() != want {
		t.Errorf("got %s, want %s", b.String(), want)
	}
}

func TestJCSNumbers(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"0", "0", false},
		{"-4094", "-4094", false},
		{"9007199254740992", "9007199254740992", false},
		{"9007199254740993", "", true}, // past 2^53: ECMAScript would round it
		{"1.5", "", true},
		{"1e3", "", true},
	} {
		var b bytes.Buffer
		err := writeJCS(&b, json.Number(tc.in))
		if (err != nil) != tc.wantErr || b.String() != tc.want {
			t.Errorf("%s: got %q, %v; want %q (error %v)", tc.in, b.String(), err, tc.want, tc.wantErr)
		}
	}
}
