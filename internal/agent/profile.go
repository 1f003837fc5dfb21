package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// The operator asks for a bond change, but it may be compromised; the agent checks the change
// itself, before anything on the host is touched, against the signed EdgeProfile in force,
// which the operator cannot write (it may read EdgeProfiles, never create or change one):
//
//   - the profile in force is the one the NodewrightCluster's spec.profileRef names; its
//     signature is verified with the trusted public keys (the chart's ConfigMap
//     nodewright-profile-keys, which the operator cannot change either), by the code the
//     operator's admission verifies with (internal/profile); its version is not lower than
//     the highest this node has verified before (kept on the host's disk, beside the
//     checkpoints);
//   - the bond is the profile's storage bond, and the mode its bondMode or one of its
//     allowedBondModes;
//   - the API server is always probed after the change, and at least one peer whenever the
//     profile's topology has more than one node; every peer must be reached through the bond
//     (the kernel's route), never an address of the node itself or one behind another link,
//     which would answer whatever the bond does.
//
// A refusal fails the operation with a reason and a message that names the field; nothing on
// the host is touched.

// The reasons a bond change is refused for.
const (
	// ReasonNoProfile: no EdgeProfile is in force to check the change against.
	ReasonNoProfile = "NoProfileInForce"
	// ReasonProfileNotTrusted: the profile in force does not verify with the trusted keys, or
	// its version is lower than one this node verified before.
	ReasonProfileNotTrusted = "ProfileNotTrusted"
	// ReasonNotAllowed: the profile does not allow the bond or the mode.
	ReasonNotAllowed = "NotAllowedByProfile"
	// ReasonProbesRequired: the probes the agent always runs are switched off, missing, or aim
	// at something that answers whatever the bond does.
	ReasonProbesRequired = "ProbesRequired"
)

// Profiles gives the EdgeProfile a bond change is checked against: verified, or an
// *OperationError saying why there is none.
type Profiles interface {
	InForce(ctx context.Context) (*nwv1.EdgeProfile, error)
}

// The API's resources the profile is read from.
var (
	NodewrightClusters = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "nodewrightclusters"}
	EdgeProfiles       = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "edgeprofiles"}
	ConfigMaps         = kubelite.Resource{Version: "v1", Resource: "configmaps"}
)

// floorFile, in the state folder, keeps the highest profile version verified on this node.
const floorFile = "profile-floor.json"

// SignedProfile reads the EdgeProfile in force from the API server and verifies it itself.
type SignedProfile struct {
	Client *kubelite.Client
	// Keys is the ConfigMap of the trusted public keys, read by name.
	Keys types.NamespacedName
	// StateDir is where the version floor is kept: on the host's disk, so that neither the
	// API server's objects nor a restart lowers it.
	StateDir string
}

// floor is what floorFile holds.
type floor struct {
	Version string `json:"version"`
	Profile string `json:"profile"`
	KeyID   string `json:"keyID,omitempty"`
}

// InForce reads the NodewrightCluster's spec.profileRef, the EdgeProfile it names and the
// trusted keys, verifies the profile's signature, checks its version against the node's
// floor and raises the floor to it.
func (s *SignedProfile) InForce(ctx context.Context) (*nwv1.EdgeProfile, error) {
	nwc := &nwv1.NodewrightCluster{}
	err := s.Client.Get(ctx, NodewrightClusters.Path("", nwv1.NodewrightClusterName), nwc)
	if kubelite.IsNotFound(err) {
		return nil, &OperationError{Reason: ReasonNoProfile, Message: "no EdgeProfile is in force: there is no NodewrightCluster " +
			nwv1.NodewrightClusterName + " to name one, and the agent changes a bond only as a signed EdgeProfile allows"}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the NodewrightCluster: %w", err)
	}
	if nwc.Spec.ProfileRef == nil || nwc.Spec.ProfileRef.Name == "" {
		return nil, &OperationError{Reason: ReasonNoProfile, Message: "no EdgeProfile is in force: the NodewrightCluster's spec.profileRef names none, " +
			"and the agent changes a bond only as a signed EdgeProfile allows"}
	}
	name := nwc.Spec.ProfileRef.Name
	p := &nwv1.EdgeProfile{}
	err = s.Client.Get(ctx, EdgeProfiles.Path("", name), p)
	if kubelite.IsNotFound(err) {
		return nil, &OperationError{Reason: ReasonNoProfile, Message: fmt.Sprintf(
			"spec.profileRef of the NodewrightCluster names the EdgeProfile %s, which does not exist", name)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the EdgeProfile %s: %w", name, err)
	}
	keys, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	active, err := profile.VerifyProfile(p, keys)
	if err != nil {
		return nil, &OperationError{Reason: ReasonProfileNotTrusted, Message: fmt.Sprintf(
			"the EdgeProfile %s in force (the NodewrightCluster's spec.profileRef) does not verify with the trusted keys of ConfigMap %s: %v", name, s.Keys, err)}
	}
	if err := s.raiseFloor(active); err != nil {
		return nil, err
	}
	return p, nil
}

// keys reads the trusted public keys from their ConfigMap.
func (s *SignedProfile) keys(ctx context.Context) ([]profile.PublicKey, error) {
	source := "ConfigMap " + s.Keys.String()
	cm := &corev1.ConfigMap{}
	err := s.Client.Get(ctx, ConfigMaps.Path(s.Keys.Namespace, s.Keys.Name), cm)
	var keys []profile.PublicKey
	switch {
	case kubelite.IsNotFound(err):
		err = fmt.Errorf("%w: %s does not exist", profile.ErrNoTrustedKeys, source)
	case err != nil:
		return nil, fmt.Errorf("reading the trusted keys from %s: %w", source, err)
	default:
		keys, err = profile.TrustedKeys(source, cm.Data)
	}
	if err != nil {
		return nil, &OperationError{Reason: ReasonProfileNotTrusted, Message: "the EdgeProfile in force cannot be verified: " + err.Error()}
	}
	return keys, nil
}

// raiseFloor refuses active when its version is lower than the node's floor, and otherwise
// raises the floor to it. A floor file that cannot be read refuses every profile until a
// person looks at it: guessing it would lower it.
func (s *SignedProfile) raiseFloor(active nwv1.ActiveProfile) error {
	path := filepath.Join(s.StateDir, floorFile)
	var was floor
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the profile version floor %s: %w", path, err)
	default:
		if err := json.Unmarshal(data, &was); err != nil || was.Version == "" {
			return &OperationError{Reason: ReasonProfileNotTrusted, Message: fmt.Sprintf(
				"the profile version floor %s cannot be read (%v): a person must look at the node and remove it", path, err)}
		}
	}
	if err := profile.CheckUpgrade(was.Version, active.Version); err != nil {
		return &OperationError{Reason: ReasonProfileNotTrusted, Message: fmt.Sprintf(
			"the EdgeProfile %s in force has version %s, lower than the version %s of the EdgeProfile %s this node verified before (%s): %v",
			active.Name, active.Version, was.Version, was.Profile, path, err)}
	}
	if was.Version != "" {
		if c, _ := profile.CompareVersions(active.Version, was.Version); c <= 0 {
			return nil
		}
	}
	data, err = json.Marshal(floor{Version: active.Version, Profile: active.Name, KeyID: active.KeyID})
	if err != nil {
		return err
	}
	if err := hostos.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("raising the profile version floor %s: %w", path, err)
	}
	return nil
}

// checkChange says why spec may not be made under the verified profile p, nil when it may:
// the bond and the mode are p's, the API server is probed, and at least one peer, reached
// through the bond (through says why an address is not), when p's topology has more than
// one node.
func checkChange(spec *nwv1.SetBondModeOperation, p *nwv1.EdgeProfile, through func(bond string, ip net.IP) error) error {
	in := fmt.Sprintf("the EdgeProfile %s %s in force", p.Name, p.Spec.Version)
	n := p.Spec.Network
	if spec.Bond != n.BondInterface {
		return &OperationError{Reason: ReasonNotAllowed, Message: fmt.Sprintf(
			"spec.setBondMode.bond: %s is not the storage bond of %s (%s): the agent changes no other bond", spec.Bond, in, n.BondInterface)}
	}
	allowed := append([]nwv1.BondMode{n.BondMode}, n.AllowedBondModes...)
	if !slices.Contains(allowed, spec.Mode) {
		names := make([]string, len(allowed))
		for i, m := range allowed {
			names[i] = string(m)
		}
		return &OperationError{Reason: ReasonNotAllowed, Message: fmt.Sprintf(
			"spec.setBondMode.mode: %s is not allowed by %s, which allows %s (spec.network.bondMode and allowedBondModes)", spec.Mode, in, strings.Join(names, ", "))}
	}
	if !ptr.Deref(spec.Probes.APIServer, true) {
		return &OperationError{Reason: ReasonProbesRequired, Message: "spec.setBondMode.probes.apiServer: false, but the agent always probes the API server after a bond change"}
	}
	for i, peer := range spec.Probes.Peers {
		ip := net.ParseIP(peer)
		if ip == nil {
			return &OperationError{Reason: ReasonProbesRequired, Message: fmt.Sprintf("spec.setBondMode.probes.peers[%d]: %q is not an IP address", i, peer)}
		}
		if err := through(spec.Bond, ip); err != nil {
			return &OperationError{Reason: ReasonProbesRequired, Message: fmt.Sprintf(
				"spec.setBondMode.probes.peers[%d]: %v: a probe of it would not show whether %s carries traffic", i, err, spec.Bond)}
		}
	}
	if len(spec.Probes.Peers) == 0 && p.Spec.Topology != nwv1.TopologySingleNode {
		return &OperationError{Reason: ReasonProbesRequired, Message: fmt.Sprintf(
			"spec.setBondMode.probes.peers: empty, but %s has the topology %s: the agent probes at least one peer through %s after a bond change",
			in, p.Spec.Topology, spec.Bond)}
	}
	return nil
}
