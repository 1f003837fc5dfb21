package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MigrationMode chooses how a volume is moved.
// +kubebuilder:validation:Enum=Cold;Hot
type MigrationMode string

// The migration modes.
const (
	// MigrationCold stops the VM, copies the volume block for block and starts the VM on the
	// copy. Works with every storage backend.
	MigrationCold MigrationMode = "Cold"
	// MigrationHot clones the volume with the storage backend (CSI clone) while the VM runs,
	// verifies the clone, then restarts the VM briefly onto it. Refused when the backend
	// cannot clone.
	MigrationHot MigrationMode = "Hot"
)

// ChecksumAlgorithm is the hash used to prove a copy is exact.
// +kubebuilder:validation:Enum=BLAKE3;SHA256
type ChecksumAlgorithm string

// The checksum algorithms.
const (
	ChecksumBLAKE3 ChecksumAlgorithm = "BLAKE3"
	ChecksumSHA256 ChecksumAlgorithm = "SHA256"
)

// MigrationTarget describes the PVC the volume moves to.
type MigrationTarget struct {
	// storageClassName is the StorageClass of the new PVC. Its backend must support the
	// access mode and volume mode below.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName string `json:"storageClassName"`

	// accessMode of the new PVC. ReadWriteMany lets KubeVirt live-migrate the VM afterwards.
	// +optional
	// +kubebuilder:default=ReadWriteMany
	// +kubebuilder:validation:Enum=ReadWriteMany;ReadWriteOnce
	AccessMode corev1.PersistentVolumeAccessMode `json:"accessMode,omitempty"`

	// volumeMode of the new PVC.
	// +optional
	// +kubebuilder:default=Block
	// +kubebuilder:validation:Enum=Block;Filesystem
	VolumeMode corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`

	// size of the new PVC; at least the source's. Defaults to the source's size.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="must be greater than zero"
	Size *resource.Quantity `json:"size,omitempty"`
}

// MigrationTimeouts bounds the waits on the VM.
type MigrationTimeouts struct {
	// vmStop is how long to wait for the VM to stop before giving up and rolling back.
	// Between 10s and 1h.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('1h'))",message="must be between 10s and 1h"
	VMStop metav1.Duration `json:"vmStop,omitzero"`

	// vmStart is how long to wait for the VM to run on the new volume before rolling back to
	// the source. Between 10s and 1h.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('1h'))",message="must be between 10s and 1h"
	VMStart metav1.Duration `json:"vmStart,omitzero"`
}

// VMVolumeMigrationSpec names the VM volume to move and where to.
type VMVolumeMigrationSpec struct {
	// vmName is the KubeVirt VirtualMachine, in the migration's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	VMName string `json:"vmName"`

	// volumeName is the volume's name in the VM's spec.template.spec.volumes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	VolumeName string `json:"volumeName"`

	// mode is Cold (stop, copy, verify, restart) or Hot (clone while running, verify,
	// short restart). When unset, the migration is Cold. Hot is refused, never downgraded,
	// where the backend cannot clone.
	// +optional
	Mode MigrationMode `json:"mode,omitempty"`

	// target describes the new PVC.
	// +required
	Target MigrationTarget `json:"target"`

	// snapshotClassName is the VolumeSnapshotClass for the before and after snapshots.
	// When unset, the default class of the volume's CSI driver is used.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SnapshotClassName string `json:"snapshotClassName,omitempty"`

	// retainSource keeps the source PVC after a successful migration.
	// +optional
	// +kubebuilder:default=true
	RetainSource *bool `json:"retainSource,omitempty"`

	// checksumAlgorithm is the hash that proves the copy exact.
	// +optional
	// +kubebuilder:default=BLAKE3
	ChecksumAlgorithm ChecksumAlgorithm `json:"checksumAlgorithm,omitempty"`

	// timeouts bound the waits on the VM.
	// +optional
	// +kubebuilder:default={}
	Timeouts MigrationTimeouts `json:"timeouts,omitzero"`
}

// MigrationProgress is how far the data copy has come.
type MigrationProgress struct {
	// bytesDone is the number of bytes copied (or verified) so far.
	// +kubebuilder:validation:Minimum=0
	BytesDone int64 `json:"bytesDone"`

	// bytesTotal is the size of the source volume.
	// +kubebuilder:validation:Minimum=0
	BytesTotal int64 `json:"bytesTotal"`

	// percent is bytesDone of bytesTotal, rounded down, for display.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
}

// MigrationChecksum is the proof that the copy is exact.
type MigrationChecksum struct {
	// algorithm of both digests.
	// +required
	Algorithm ChecksumAlgorithm `json:"algorithm"`

	// source is the digest of the source volume, as "<algorithm>:<hex>".
	// +optional
	// +kubebuilder:validation:MaxLength=200
	Source string `json:"source,omitempty"`

	// target is the digest of the target volume read back from disk, as "<algorithm>:<hex>".
	// +optional
	// +kubebuilder:validation:MaxLength=200
	Target string `json:"target,omitempty"`
}

// MigrationSnapshots names the snapshots that bracket a migration.
type MigrationSnapshots struct {
	// before is the VolumeSnapshot of the source taken before anything changed.
	// +optional
	Before string `json:"before,omitempty"`

	// after is the VolumeSnapshot of the target taken once the VM ran on it.
	// +optional
	After string `json:"after,omitempty"`
}

// VMVolumeMigrationStatus is the migration's progress and evidence.
type VMVolumeMigrationStatus struct {
	WorkflowStatus `json:",inline"`

	// progress of the data copy or verification.
	// +optional
	Progress *MigrationProgress `json:"progress,omitempty"`

	// checksum holds the digests of source and target.
	// +optional
	Checksum *MigrationChecksum `json:"checksum,omitempty"`

	// sourcePVCName is the PVC the volume was on.
	// +optional
	SourcePVCName string `json:"sourcePVCName,omitempty"`

	// targetPVCName is the PVC the migration created.
	// +optional
	TargetPVCName string `json:"targetPVCName,omitempty"`

	// snapshots taken before and after.
	// +optional
	Snapshots MigrationSnapshots `json:"snapshots,omitempty"`

	// jobName is the Job that copied or verified the data.
	// +optional
	JobName string `json:"jobName,omitempty"`
}

// VMVolumeMigration moves one volume of a KubeVirt VM onto a new PVC (typically
// ReadWriteMany), proves the data identical with a checksum, and brackets the change with
// snapshots, or leaves the VM exactly as it was. The spec cannot change once the migration
// has started; delete the object to cancel (a running migration is rolled back first).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vmvm;vmmig,categories=nodewright
// +kubebuilder:printcolumn:name="VM",type=string,JSONPath=`.spec.vmName`
// +kubebuilder:printcolumn:name="Volume",type=string,JSONPath=`.spec.volumeName`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.steps[?(@.state=="Running")].name`,description="The step now running"
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.progress.percent`,description="Percent of the data copied"
// +kubebuilder:printcolumn:name="Target Class",type=string,JSONPath=`.spec.target.storageClassName`,priority=1
// +kubebuilder:printcolumn:name="Checksum",type=string,JSONPath=`.status.checksum.target`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].reason`,priority=1,description="Why the migration is where it is: InProgress, APIsMissing, a failed step"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",message="spec cannot change once the migration has started; delete it to cancel",fieldPath=".spec"
type VMVolumeMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the VM volume to move and where to.
	// +required
	Spec VMVolumeMigrationSpec `json:"spec"`

	// status is the migration's progress and evidence.
	// +optional
	Status VMVolumeMigrationStatus `json:"status,omitempty"`
}

// VMVolumeMigrationList is a list of VMVolumeMigration.
//
// +kubebuilder:object:root=true
type VMVolumeMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VMVolumeMigration `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VMVolumeMigration{}, &VMVolumeMigrationList{})
}
