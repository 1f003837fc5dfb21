package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RegistrationSource names the hub provider a member cluster came from.
// +kubebuilder:validation:Enum=KubeconfigSecret;ClusterProfile
type RegistrationSource string

// The registration sources.
const (
	// FromKubeconfigSecret: a labelled Secret on the hub holding a kubeconfig.
	FromKubeconfigSecret RegistrationSource = "KubeconfigSecret"
	// FromClusterProfile: a ClusterProfile (sigs.k8s.io/cluster-inventory-api, KEP-4322).
	FromClusterProfile RegistrationSource = "ClusterProfile"
)

// Condition types and reasons of a NodewrightClusterSummary.
const (
	// ConditionReachable is True while the member's API server answers the hub's health
	// check with the hub's credentials.
	ConditionReachable = "Reachable"
	// ConditionCheckpointConsistent is True when the checkpoint the member publishes is the
	// one the hub recorded or a later one. With a witness (the hub's --audit-witness-public-key)
	// the hub records only checkpoints the witness countersigned, and a later one the witness
	// has not countersigned is True only within the grace the hub gives shipping.
	ConditionCheckpointConsistent = "CheckpointConsistent"

	ReasonAnswering        = "Answering"
	ReasonNotAnswering     = "NotAnswering"
	ReasonUnauthorized     = "Unauthorized"
	ReasonCheckpointOK     = "Consistent"
	ReasonNoCheckpoint     = "NoCheckpoint"
	ReasonCheckpointBehind = "PublishedBehindRecorded"
	ReasonCheckpointForked = "PublishedDiffersFromRecorded"
	ReasonCheckpointBad    = "PublishedUnreadable"
	// ReasonForkedFromWitness: the member publishes a checkpoint other than the one the
	// witness countersigned at the same sequence (a rewritten trail), or a countersigned one
	// that cannot extend the recorded one (another witness, or the witness countersigned two
	// checkpoints at one sequence).
	ReasonForkedFromWitness = "ForkedFromWitness"
	// ReasonAwaitingWitness: the member's checkpoint is later than the witnessed one, within
	// the grace shipping has to get it countersigned.
	ReasonAwaitingWitness = "AwaitingWitness"
	// ReasonNotWitnessed: the member's checkpoint stayed later than the witnessed one beyond
	// the grace: the witness never countersigns a rewritten trail, and does not get a trail
	// that is no longer shipped.
	ReasonNotWitnessed = "NotWitnessed"
	// ReasonWitnessedBad: the witnessed checkpoint the member publishes does not parse or its
	// countersignature does not verify with the hub's witness keys.
	ReasonWitnessedBad = "WitnessedUnreadable"
)

// The reasons of Reachable False for a registration the hub does not engage.
const (
	// ReasonRegistrationRefused: the hub does not engage the member because its registration
	// asks for what the hub refuses (an exec plugin, a file, a proxy, impersonation, plain
	// HTTP, unverified TLS, a server other than the one its credential is for); the message
	// names the field.
	ReasonRegistrationRefused = "RegistrationRefused"
	// ReasonNoUsableAccess: the registration gives no access the hub can use yet (the Secret
	// Reader's Secret missing, say); the message says what is missing.
	ReasonNoUsableAccess = "NoUsableAccess"
)

// Registration says where the hub found the member.
type Registration struct {
	// source is the provider that registered the member.
	// +required
	Source RegistrationSource `json:"source"`
	// namespace of the registering object on the hub.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the registering object (the Secret or the ClusterProfile) on the hub.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NodewrightClusterSummarySpec identifies the member; the hub sets it when it creates the
// summary.
type NodewrightClusterSummarySpec struct {
	// registration is the hub object the member came from.
	// +required
	Registration Registration `json:"registration"`
}

// MemberNodes counts the member's nodes, as its NodewrightCluster does.
type MemberNodes struct {
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// +optional
	Total int32 `json:"total,omitempty"`
}

// MemberWorkflow is one cluster-wide workflow that is not finished on the member.
type MemberWorkflow struct {
	// kind: BondModeFlipPlan or ReplicationUpgrade.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Kind string `json:"kind"`
	// name of the workflow object on the member.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// phase of the workflow.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase,omitempty"`
	// step is the step that runs, or else the latest one that started.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Step string `json:"step,omitempty"`
	// progress as the workflow reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Progress string `json:"progress,omitempty"`
}

// MemberProfile is the EdgeProfile in force on the member.
type MemberProfile struct {
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
}

// AuditCheckpoint is one signed audit checkpoint: the chain had sequence entries and the
// last of them hashed to hash.
type AuditCheckpoint struct {
	// sequence is the checkpoint's size: the entries it covers.
	// +required
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence"`
	// hash is the hex SHA-256 of the last entry the checkpoint covers.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Hash string `json:"hash"`
	// time the checkpoint was signed.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// witnessKeyId names the witness key that countersigned the checkpoint; empty for a
	// checkpoint recorded on the member's word alone (a hub without witness keys).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	WitnessKeyID string `json:"witnessKeyId,omitempty"`
	// witnessTime is when the witness countersigned.
	// +optional
	WitnessTime *metav1.Time `json:"witnessTime,omitempty"`
}

// The bounds of what a summary keeps of a member's nodes' boots.
const (
	// MaxBootNodes is how many of the member's Kairos nodes a summary lists.
	MaxBootNodes = 64
	// MaxFellBackImages is how many images a summary counts fallbacks from.
	MaxFellBackImages = 16
	// MaxImageLength bounds an image reference, as the member's NodewrightAgentStatus does.
	MaxImageLength = 512
)

// MemberBoots is what the hub keeps of the boots of the member's Kairos nodes, read from
// their NodewrightAgentStatuses (status.os.kairos and status.os.bootID).
type MemberBoots struct {
	// nodes are the member's nodes that report a Kairos boot, by name: at most 64.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Nodes []MemberNodeBoot `json:"nodes,omitempty"`
	// kairosNodes counts every node that reports a Kairos boot, listed or not.
	// +optional
	// +kubebuilder:validation:Minimum=0
	KairosNodes int32 `json:"kairosNodes,omitempty"`
	// fellBack counts, per image, the member's nodes whose last fallback was from that image
	// (lastFallback.fromImage), listed or not: at most 16 images, the most nodes first, then
	// by image.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	FellBack []ImageFallbacks `json:"fellBack,omitempty"`
	// fellBackNodes counts every node with a last fallback, whatever its image: more than the
	// sum of fellBack when more images fell back than it lists.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FellBackNodes int32 `json:"fellBackNodes,omitempty"`
	// unreadable says why the hub could not read the member's nodes (a member whose
	// fleet.hubReader role does not grant nodewrightagentstatuses: a chart from before the
	// hub read them); what an earlier read found is kept.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Unreadable string `json:"unreadable,omitempty"`
}

// MemberNodeBoot is one Kairos node's boot.
type MemberNodeBoot struct {
	// name of the node.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// slot is the boot entry the node runs from: Active, Passive, Recovery, AutoReset or
	// LiveCD; empty when the node does not say.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Slot string `json:"slot,omitempty"`
	// image the node booted (KAIROS_IMAGE_REPO).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// lastFallback is the last boot that fell back from an image the node's agent staged.
	// +optional
	LastFallback *MemberFallback `json:"lastFallback,omitempty"`
}

// MemberFallback is a boot that fell back from a staged image to the previous one.
type MemberFallback struct {
	// fromImage is the image that did not boot.
	// +required
	// +kubebuilder:validation:MaxLength=512
	FromImage string `json:"fromImage"`
	// toImage is the image the node booted instead.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ToImage string `json:"toImage,omitempty"`
	// bootID is the boot that fell back.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`
	// seenAt is when the node's agent first saw it.
	// +optional
	SeenAt *metav1.Time `json:"seenAt,omitempty"`
	// thisBoot is true while the node runs the boot that fell back (its bootID is the node's).
	// +optional
	ThisBoot bool `json:"thisBoot,omitempty"`
}

// ImageFallbacks counts the nodes whose last fallback was from one image.
type ImageFallbacks struct {
	// image is the image the nodes fell back from.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// nodes is how many nodes fell back from it.
	// +required
	// +kubebuilder:validation:Minimum=0
	Nodes int32 `json:"nodes"`
}

// NodewrightClusterSummaryStatus is the member's state as the hub last saw it.
type NodewrightClusterSummaryStatus struct {
	// phase of the member's NodewrightCluster.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase,omitempty"`
	// nodes of the member's NodewrightCluster.
	// +optional
	Nodes MemberNodes `json:"nodes,omitempty"`
	// management mode in effect on the member.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Management string `json:"management,omitempty"`
	// workflows are the member's cluster-wide workflows that are not finished.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Workflows []MemberWorkflow `json:"workflows,omitempty"`
	// workflow sums up workflows for kubectl get: "ReplicationUpgrade/u1 Place 120/400", and
	// "(+N)" when more run.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Workflow string `json:"workflow,omitempty"`
	// profile in force on the member.
	// +optional
	Profile *MemberProfile `json:"profile,omitempty"`
	// kubernetesVersion is the member API server's version (discovery), read once per
	// engagement.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// nodewrightVersion is the version of the member's Nodewright operator: its
	// NodewrightCluster's status.operatorVersion, or, from an operator that predates that
	// field, the app.kubernetes.io/version label of its nodewright-operator Deployment, as
	// the chart sets it; empty when there is none.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	NodewrightVersion string `json:"nodewrightVersion,omitempty"`
	// checkpoint is the latest audit checkpoint the hub recorded from the member. It only
	// moves forward: a published checkpoint behind it or different from it at the same
	// sequence is kept out (publishedCheckpoint shows it) and CheckpointConsistent is False.
	// With a witness it is the latest checkpoint the witness countersigned, and moves only to
	// a later one of the same witness.
	// +optional
	Checkpoint *AuditCheckpoint `json:"checkpoint,omitempty"`
	// publishedCheckpoint is what the member publishes, set only while it does not match
	// checkpoint.
	// +optional
	PublishedCheckpoint *AuditCheckpoint `json:"publishedCheckpoint,omitempty"`
	// awaitingWitnessSince is when the hub first saw the member publish a checkpoint later
	// than the witnessed one, the witnessed one not moving since; set only while that lasts.
	// +optional
	AwaitingWitnessSince *metav1.Time `json:"awaitingWitnessSince,omitempty"`
	// boots are the member's Kairos nodes' boots: each node's slot, image and last fallback,
	// and how many nodes fell back from each image. Absent when the member has no Kairos
	// node, or before the hub read them.
	// +optional
	Boots *MemberBoots `json:"boots,omitempty"`
	// conditions: Reachable and CheckpointConsistent.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodewrightClusterSummary is one member cluster's health as the fleet hub sees it: read from
// the member's NodewrightCluster, workflows and audit checkpoint through watches, and
// written only when something changed. Its name is the member's name on the hub.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nwcs,categories=nodewright-fleet
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.nodes.ready`,description="Nodes with a fresh heartbeat"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes.total`
// +kubebuilder:printcolumn:name="Management",type=string,JSONPath=`.status.management`
// +kubebuilder:printcolumn:name="Workflow",type=string,JSONPath=`.status.workflow`
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.status.profile.version`,description="Version of the EdgeProfile in force"
// +kubebuilder:printcolumn:name="Checkpoint OK",type=string,JSONPath=`.status.conditions[?(@.type=="CheckpointConsistent")].status`
// +kubebuilder:printcolumn:name="Kubernetes",type=string,JSONPath=`.status.kubernetesVersion`,priority=1
// +kubebuilder:printcolumn:name="Nodewright",type=string,JSONPath=`.status.nodewrightVersion`,priority=1
// +kubebuilder:printcolumn:name="Fell back",type=integer,JSONPath=`.status.boots.fellBackNodes`,priority=1,description="Kairos nodes whose last fallback is known: their boot of an image fell back"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodewrightClusterSummary struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NodewrightClusterSummarySpec `json:"spec"`
	// +optional
	Status NodewrightClusterSummaryStatus `json:"status,omitempty"`
}

// NodewrightClusterSummaryList is a list of NodewrightClusterSummary.
//
// +kubebuilder:object:root=true
type NodewrightClusterSummaryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodewrightClusterSummary `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodewrightClusterSummary{}, &NodewrightClusterSummaryList{})
}
