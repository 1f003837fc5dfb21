package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// signingKey makes a key pair, as cosign generate-key-pair does.
func signingKey(t *testing.T) *profile.PrivateKey {
	t.Helper()
	priv, _, err := profile.GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := profile.LoadPrivateKey(priv, nil)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// edgeProfile is a profile of a three-node site at version, signed by key (unsigned when nil).
func edgeProfile(t *testing.T, name, version string, key *profile.PrivateKey) *nwv1.EdgeProfile {
	t.Helper()
	p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nwv1.EdgeProfileSpec{Version: version,
		Topology: nwv1.TopologyThreeNode, OS: nwv1.HostOSSystemdNetworkd, Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR},
		Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: nwv1.BondModeActiveBackup, AllowedBondModes: []nwv1.BondMode{nwv1.BondMode8023AD}}}}
	if key != nil {
		sig, err := profile.Sign(p.Spec, key)
		if err != nil {
			t.Fatal(err)
		}
		p.Signature = sig
	}
	return p
}

// TestTheProfileInForceIsVerifiedByTheAgent: the agent reads the profile the
// NodewrightCluster's spec.profileRef names and verifies it itself with the trusted keys'
// ConfigMap, against a real API server. It refuses, saying why, when there is no cluster, no
// profileRef, no such profile, a profile unsigned, signed by a key not trusted or changed after
// it was signed, no trusted key, or a profile older than one it verified before (its floor, on
// the host's disk, which a damaged file does not lower); it takes a signed one and raises its
// floor to it.
func TestTheProfileInForceIsVerifiedByTheAgent(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	trusted, other := signingKey(t), signingKey(t)
	keys := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodewright-profile-keys"},
		Data: map[string]string{"cosign.pub": string(trusted.Public().PEM())}}
	if err := env.Client.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	tampered := edgeProfile(t, "verify-tampered", "1.2.0", trusted)
	tampered.Spec.Network.AllowedBondModes = append(tampered.Spec.Network.AllowedBondModes, nwv1.BondModeBalanceRR)
	for _, p := range []*nwv1.EdgeProfile{
		edgeProfile(t, "verify-good", "1.2.0", trusted),
		edgeProfile(t, "verify-unsigned", "1.2.0", nil),
		edgeProfile(t, "verify-other-key", "1.2.0", other),
		tampered,
		edgeProfile(t, "verify-older", "1.0.0", trusted),
		edgeProfile(t, "verify-newer", "1.3.0", trusted),
	} {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	}
	state := t.TempDir()
	s := &agent.SignedProfile{Client: env.LiteClient(t), Keys: types.NamespacedName{Namespace: ns, Name: keys.Name}, StateDir: state}
	refused := func(what, reason, message string) {
		t.Helper()
		p, err := s.InForce(ctx)
		var failed *agent.OperationError
		if !errors.As(err, &failed) || failed.Reason != reason || !strings.Contains(failed.Message, message) {
			taken := ""
			if p != nil {
				taken = p.Name
			}
			t.Errorf("%s: took %q, error %v; want %s saying %q", what, taken, err, reason, message)
		}
	}
	taken := func(name string) {
		t.Helper()
		p, err := s.InForce(ctx)
		if err != nil || p.Name != name {
			t.Fatalf("the profile in force: %v; want %s", err, name)
		}
	}
	floor := func() string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(state, "profile-floor.json"))
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	point := func(name string) {
		t.Helper()
		nwc := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
			t.Fatal(err)
		}
		nwc.Spec.ProfileRef = &nwv1.ProfileReference{Name: name}
		if name == "" {
			nwc.Spec.ProfileRef = nil
		}
		if err := env.Client.Update(ctx, nwc); err != nil {
			t.Fatal(err)
		}
	}

	refused("without a NodewrightCluster", agent.ReasonNoProfile, "there is no NodewrightCluster nodewright")
	nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
			ConfigMapRef: nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
			DaemonSetRef: nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"}, EventComponent: "absent"}}}
	if err := env.Client.Create(ctx, nwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), nwc) })
	refused("without spec.profileRef", agent.ReasonNoProfile, "the NodewrightCluster's spec.profileRef names none")
	point("verify-missing")
	refused("naming no profile", agent.ReasonNoProfile, "names the EdgeProfile verify-missing, which does not exist")
	point("verify-unsigned")
	refused("unsigned", agent.ReasonProfileNotTrusted, "the EdgeProfile verify-unsigned in force (the NodewrightCluster's spec.profileRef) does not verify with the trusted keys of ConfigMap "+
		ns+"/nodewright-profile-keys: signature: the profile is not signed")
	point("verify-other-key")
	refused("signed by another key", agent.ReasonProfileNotTrusted, "signature: the signature does not verify: it is not a signature of this spec by the trusted key "+string(trusted.Public().ID()))
	point("verify-tampered")
	refused("changed after it was signed", agent.ReasonProfileNotTrusted, "signature: the signature does not verify")
	if f := floor(); f != "" {
		t.Fatalf("the floor was written before a profile verified: %s", f)
	}

	point("verify-good")
	taken("verify-good")
	if f := floor(); !strings.Contains(f, `"version":"1.2.0"`) || !strings.Contains(f, `"profile":"verify-good"`) {
		t.Errorf("the floor after verify-good: %s; want 1.2.0", f)
	}
	point("verify-older")
	refused("older than one verified before", agent.ReasonProfileNotTrusted,
		"the EdgeProfile verify-older in force has version 1.0.0, lower than the version 1.2.0 of the EdgeProfile verify-good this node verified before")

	point("verify-good")
	if err := env.Client.Delete(ctx, keys); err != nil {
		t.Fatal(err)
	}
	refused("without the trusted keys' ConfigMap", agent.ReasonProfileNotTrusted,
		"the EdgeProfile in force cannot be verified: no trusted public keys are configured: ConfigMap "+ns+"/nodewright-profile-keys does not exist")
	keys = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodewright-profile-keys"}}
	if err := env.Client.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	refused("with no key in it", agent.ReasonProfileNotTrusted, "ConfigMap "+ns+"/nodewright-profile-keys holds none")
	keys.Data = map[string]string{"other.pub": string(other.Public().PEM()), "cosign.pub": string(trusted.Public().PEM())}
	if err := env.Client.Update(ctx, keys); err != nil {
		t.Fatal(err)
	}
	taken("verify-good")

	if err := os.WriteFile(filepath.Join(state, "profile-floor.json"), []byte(`{"vers`), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("with a damaged floor", agent.ReasonProfileNotTrusted, "profile-floor.json cannot be read")
	if err := os.Remove(filepath.Join(state, "profile-floor.json")); err != nil {
		t.Fatal(err)
	}
	point("verify-newer")
	taken("verify-newer")
	if f := floor(); !strings.Contains(f, `"version":"1.3.0"`) {
		t.Errorf("the floor after verify-newer: %s; want 1.3.0", f)
	}
	point("verify-good")
	refused("1.2.0 after 1.3.0", agent.ReasonProfileNotTrusted, "lower than the version 1.3.0")
	if err := env.Client.Delete(ctx, nwc); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
