// Package storage is the storage seam: what each storage backend can safely do, declared as
// constants of its Go type and never probed live. Controllers ask a backend before they act,
// and refuse what it cannot do rather than falling back to something weaker.
package storage

import (
	"fmt"
	"strings"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Backend is one storage backend's static capabilities.
type Backend interface {
	// Name is the backend's name for people, e.g. "LINSTOR".
	Name() string
	// Kind is the backend's name in an EdgeProfile's spec.storage.backend.
	Kind() nwv1.StorageBackendKind
	// Provisioners are the CSI driver names (a StorageClass's provisioner) the backend answers
	// to. A name that starts with "*." stands for that name under any prefix, as drivers
	// deployed per namespace are named.
	Provisioners() []string

	// SupportsSnapshot: CSI VolumeSnapshots of its volumes can be taken and restored.
	SupportsSnapshot() bool
	// SupportsClone: a new volume can be a CSI clone of an existing one (a PVC dataSource).
	SupportsClone() bool
	// SupportsRWXBlock: a raw block volume can be attached to two nodes at once
	// (ReadWriteMany, volumeMode Block), which KubeVirt live migration needs.
	SupportsRWXBlock() bool
	// SupportsRWXFilesystem: a file system volume can be mounted on several nodes at once
	// (ReadWriteMany, volumeMode Filesystem).
	SupportsRWXFilesystem() bool
	// SupportsOnlineExpansion: a volume in use can grow.
	SupportsOnlineExpansion() bool

	// ReplicaPlacement is where the copies of a volume's data live.
	ReplicaPlacement() Placement
	// MaxReplicas is the most copies of one volume the backend can keep, whatever the site.
	MaxReplicas() int
	// NeedsTiebreaker: with two data nodes, the backend needs a third, data-less node to
	// vote, or losing either node stops writes (the TwoNodeTiebreaker topology provides it).
	// It is false for a backend that does not replicate: there is nothing to arbitrate.
	NeedsTiebreaker() bool
}

// All is every backend Nodewright knows, in the order of the StorageBackendKind enum, with
// Generic last.
func All() []Backend {
	return []Backend{LINSTOR{}, TopoLVM{}, Longhorn{}, CephRBD{}, Generic{}}
}

// ForKind is the backend an EdgeProfile names.
func ForKind(kind nwv1.StorageBackendKind) (Backend, error) {
	for _, b := range All() {
		if b.Kind() == kind {
			return b, nil
		}
	}
	return nil, fmt.Errorf("unknown storage backend kind %q", kind)
}

// ForProvisioner is the backend behind a StorageClass's provisioner. A provisioner it does not
// know gets Generic, which claims nothing it cannot prove. Exact names win over "*." patterns.
func ForProvisioner(provisioner string) Backend {
	for _, b := range All() {
		for _, name := range b.Provisioners() {
			if name == provisioner {
				return b
			}
		}
	}
	for _, b := range All() {
		for _, name := range b.Provisioners() {
			if suffix, ok := strings.CutPrefix(name, "*"); ok && len(provisioner) > len(suffix) && strings.HasSuffix(provisioner, suffix) {
				return b
			}
		}
	}
	return Generic{Provisioner: provisioner}
}
