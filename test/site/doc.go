// Package site is the local site: it plays, in one place and on real files, the parts of a
// cluster that envtest does not run, so that a test against the real kube-apiserver can prove
// that real bytes moved.
//
// A Site plays:
//
//   - a CSI provisioner and the PV controller, for the StorageClasses whose provisioner is one
//     of Options.Drivers: every claim gets a sparse backing file of the requested size, a
//     PersistentVolume and a binding. A claim whose data source is a VolumeSnapshot starts as
//     a byte copy of the snapshot's file, one whose data source is a claim (a CSI clone) as a
//     byte copy of that claim's file. WaitForFirstConsumer claims are provisioned once a pod on
//     the site's node or a VirtualMachineInstance uses them, as the scheduler would trigger.
//     Released volumes are reclaimed (Delete removes the PV and the file, Retain keeps both).
//   - the pvc-protection and pv-protection controllers: the finalizers the API server puts on
//     claims and volumes are removed once no unfinished pod and no unfinished VMI uses the
//     claim, and once the volume is no longer bound.
//   - the snapshot controller and the CSI snapshotter: a VolumeSnapshot of a served claim gets
//     a byte copy of the claim's file at that moment, a VolumeSnapshotContent, and a ready
//     status; a missing VolumeSnapshotClass is reported in status.error. Deleting the snapshot
//     deletes the content and the file (deletionPolicy Delete), unless a pending claim is
//     still being restored from it.
//   - virt-controller and virt-handler of KubeVirt: a VirtualMachine that should run gets a
//     VirtualMachineInstance made from its template as it is at start time, which goes Running
//     once its claims are bound; one that should not run loses it. A VMI created on its own
//     runs too. There is no guest, so no guest agent ever connects and nothing runs inside.
//   - the Job controller, the scheduler's binding of the Job's pods to the site's node, and the
//     kubelet: each Job gets one pod at a time, whose single container must run nodewright-copy;
//     the kubelet runs the real binary on the backing files behind the container's
//     volumeDevices, serves its output as container logs through the API server
//     (pods/log reaches the site's Node at 127.0.0.1 over TLS), and reports the exit code and
//     the termination message like the real one. Job status follows the Kubernetes 1.34 rules
//     the API server enforces (SuccessCriteriaMet before Complete, FailureTarget before Failed).
//   - the garbage collector, for what the site owns: the pods of a deleted Job and the VMI of
//     a deleted VM. The orphan and foregroundDeletion finalizers are honoured; as in a cluster,
//     deleting a batch/v1 Job without a propagation policy orphans its pods (the API server's
//     default for that version), so a client that wants them gone asks for Background.
//
// The storage network of the node agents' tests is played apart, in package netsite, on real
// network namespaces, veth pairs and a bridge: only the bonding driver (a node's bond is its
// veth, the mode a file) and the switch's bond configuration (a port carries a set of modes
// and is taken down while its node runs another) are played there; its doc says exactly how.
//
// It does not play, and tests must not assume: real block devices (volumes are regular files,
// so nodewright-copy runs on files, with O_DIRECT where the file system allows it, and its
// JSON result names the backing files' paths where a pod would show its device paths); a guest
// (no agent, no freeze or thaw, no writes from inside a VM); scheduling beyond binding every
// pod to the site's one node; container images, restarts (restartPolicy OnFailure behaves like
// Never), init containers, or any command other than nodewright-copy; filesystem volumes;
// KubeVirt subresources (virtctl start/stop/restart) and live migration; CDI DataVolumes
// (a dataVolume volume is read as the claim of the same name); snapshot groups, pre-provisioned
// snapshot contents and cross-namespace data sources; the Job features podFailurePolicy,
// successPolicy, indexed completion, parallelism above one, suspend and ttlSecondsAfterFinished;
// node heartbeats and the namespace controller (a deleted namespace stays Terminating). A site
// keeps its processes in memory: a pod left Running by a site that stopped is failed by the
// next one (ContainerStatusUnknown), as a kubelet does with a container it lost.
//
// Faults are injected through Options, and each one makes the real thing fail for real: a copy
// gets a target too small for its source and nodewright-copy refuses it with its own result, a
// clone's file gets one byte flipped, a VMI fails to start. Nothing reports a result that did
// not happen.
package site
