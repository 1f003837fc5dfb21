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
//     the site's node or a VirtualMachineInstance uses them, as the scheduler would trigger
//     (the selected-node annotation names the kubelet's node, NodeName, whatever the user).
//     Released volumes are reclaimed (Delete removes the PV and the file, Retain keeps both).
//   - the pvc-protection and pv-protection controllers: the finalizers the API server puts on
//     claims and volumes are removed once no unfinished pod and no unfinished VMI uses the
//     claim, and once the volume is no longer bound.
//   - the snapshot controller and the CSI snapshotter: a VolumeSnapshot of a served claim gets
//     a byte copy of the claim's file at that moment, a VolumeSnapshotContent, and a ready
//     status; a missing VolumeSnapshotClass is reported in status.error. Deleting the snapshot
//     deletes the content and the file (deletionPolicy Delete), unless a pending claim is
//     still being restored from it.
//   - the site's nodes, Options.Nodes: a Node for each, Ready, labelled kubernetes.io/hostname,
//     its Lease renewed: the kubelet's (NodeName), created or refreshed, and others without a
//     kubelet, on which no pod runs, created unless a Node of that name exists already (a kwok
//     node, say), which is then used as it is. Like the node lifecycle controller, the site
//     removes the node.kubernetes.io/not-ready taint the API server puts on the Nodes it
//     registers. When the site stops it deletes the Nodes it created and the kubelet's.
//   - virt-controller and virt-handler of KubeVirt, and the scheduler's placement of the
//     virt-launcher pods, which do not exist. A VirtualMachine gets a VirtualMachineInstance
//     made from its template as it is at start time when its run strategy (or spec.running)
//     says so: Always and Once start one, RerunOnFailure starts one when the VM comes to it
//     from another strategy (a VMI of a RerunOnFailure VM that is deleted or succeeds is not
//     started again), Manual never does, Halted deletes it. The VMI runs once its claims are
//     bound, on the first of Options.Nodes whose Node is Ready, not cordoned, matches the
//     VMI's spec.nodeSelector and has no NoSchedule or NoExecute taint the VMI does not
//     tolerate; with none it stays Scheduling with a PodScheduled False condition (reason
//     Unschedulable, in the scheduler's words) and its VM shows ErrorUnschedulable, until a
//     node fits. Its status.nodeName and label kubevirt.io/nodeName name its node. Its
//     LiveMigratable condition is virt-handler's for its volumes: False, reason
//     DisksNotLiveMigratable with KubeVirt's message, when a claim is not ReadWriteMany (or a
//     host disk not shared), True otherwise; status.migrationMethod is BlockMigration when a
//     volume is neither a claim nor a host disk, LiveMigration otherwise. The VM's status
//     follows (printableStatus Stopped, Starting, WaitingForVolumeBinding, ErrorPvcNotFound,
//     ErrorUnschedulable, Running, Migrating, CrashLoopBackOff; ready; its Ready and
//     RestartRequired conditions). A VMI created on its own runs too. There is no guest: nothing
//     runs inside, and only the played guest agent below answers.
//   - KubeVirt's live migration, virt-controller's migration controller and the source and
//     target nodes' virt-handlers, for the VirtualMachineInstanceMigrations in scope. A
//     migration of a running VMI whose LiveMigratable condition is True goes through the phases
//     Pending, Scheduling, Scheduled, PreparingTarget, TargetReady, Running and Succeeded,
//     each written on its own and stamped in status.phaseTransitionTimestamps. Its target is
//     the first of Options.Nodes, never the VMI's own, that fits as above the VMI's node
//     selector with spec.addedNodeSelector added (the VMI's value wins on a key both set, as
//     in KubeVirt: a VMI whose selector names its node cannot leave it). The VMI's
//     status.migrationState (sourceNode, targetNode, migrationUid, targetNodeAddress,
//     startTimestamp, endTimestamp, mode PreCopy, completed, failed) and its label
//     kubevirt.io/migrationTargetNodeName follow the phases; at the end its status.nodeName and
//     kubevirt.io/nodeName name the target, and the migration keeps the final migrationState
//     in its status. A migration fails, phase Failed with a Warning Event FailedMigration
//     giving KubeVirt's reason (KubeVirt says why only in Events, or in the VMI's
//     migrationState.failureReason once the VMI was handed the migration), when its VMI does
//     not exist or has stopped, is not live-migratable, or is the subject of another
//     migration not over; a migration of a VMI that is still starting waits in Pending. With no
//     node to go to, a migration stays in Scheduling, with Warning Events
//     migrationTargetPodUnschedulable, until one fits or Options.MigrationUnschedulableTimeout
//     (or the migration's annotation kubevirt.io/migrationUnschedulablePodTimeoutSeconds)
//     passes, then fails, as KubeVirt fails one whose target pod stays unschedulable. Deleting a
//     migration that is not over aborts it, as KubeVirt does: condition
//     migrationAbortRequested, phase Failed, and, when the VMI was handed it, the VMI's
//     migrationState abortRequested, abortStatus Succeeded and failed; the VMI stays where it
//     runs and virt-controller's finalizer kubevirt.io/migrationJobFinalize goes.
//   - KubeVirt's snapshot and restore controllers (virt-controller's of KubeVirt v1.6), and
//     virt-handler's freeze and thaw through a played guest agent. A VMI runs a guest agent when
//     Options.GuestAgent says so: its AgentConnected condition is True. A
//     VirtualMachineSnapshot of a VM gets KubeVirt's finalizer, a VirtualMachineSnapshotContent
//     (vmsnapshot-content-<uid>: the VM as it was, and a volume backup of each bound claim whose
//     storage class's driver has a VolumeSnapshotClass; the others are left out), the guest's
//     freeze (status.fsFreezeStatus "frozen"; a guest already frozen is not frozen again)
//     before the first VolumeSnapshot (vmsnapshot-<uid>-volume-<volume>, controlled by the
//     content, copied by the snapshot controller above) and its thaw once every one is
//     created, before the content records its creation; the content's readiness, errors and
//     volume statuses, and the snapshot's phase (InProgress, then Succeeded once created, or
//     Failed past spec.failureDeadline, "snapshot deadline exceeded", 0 meaning none),
//     readyToUse, error, conditions, indications (Online; GuestAgent, with QuiesceFailed after
//     a failed freeze, or NoGuestAgent) and included and excluded volumes, as KubeVirt writes
//     them. A snapshot failed at its deadline has its guest thawed and its content, never
//     ready, deleted with the volumes' snapshots. Deleting a snapshot thaws a freeze still in
//     progress and deletes its content and the volumes' snapshots (the garbage collector's
//     part). A VirtualMachineRestore of an existing VM from a snapshot of it waits while the
//     VM has a VMI (targetReadinessPolicy WaitGracePeriodAndFail by default, failing after 5
//     minutes; FailImmediate; WaitEventually), then creates the claims
//     restore-<restore's uid>-<volume> from the volumes' snapshots (byte copies), waits for
//     them to be bound, gives the VM the spec it had in the snapshot (its run strategy kept)
//     with its volumes on them, and completes (status.restores, complete, restoreTime,
//     conditions and Events as KubeVirt's); an error is retried every 5 s. Fault hooks:
//     FailFreeze (the freeze call fails while the guest froze: the retry goes on, and the
//     snapshot ends Succeeded, QuiesceFailed, the guest thawed), FailThaw (the thaw fails, as
//     in kubevirt#9998: the snapshot stays InProgress until its deadline, the guest frozen),
//     HoldSnapshot (a snapshot whose volumes are never snapshotted, so never ready), and a
//     storage class without a VolumeSnapshotClass (its volume excluded).
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
// DRBD's kernel module is played in package drbdplay, inside the agent built for the local site
// (--site-drbd-dir): drbdadm is drbd-utils' own in its dry-run mode, and the kernel's state of
// the resources is played, their connections as real TCP connections between the nodes on that
// network (a peer out of reach is Connecting, a connection found again resynchronises, the
// pause flags ride the link), with a fault hook that makes a peer StandAlone.
//
// It does not play, and tests must not assume: real block devices (volumes are regular files,
// so nodewright-copy runs on files, with O_DIRECT where the file system allows it, and its
// JSON result names the backing files' paths where a pod would show its device paths); a guest
// (beyond the played agent's freeze and thaw, no writes from inside a VM, no memory to copy in a migration);
// scheduling beyond binding every pod to the kubelet's node, and for VMIs beyond the checks
// above (no resources, node affinity, topology or priorities); container images, restarts
// (restartPolicy OnFailure behaves like Never), init containers, or any command other than
// nodewright-copy; filesystem volumes; KubeVirt's snapshot source lock (VM status
// snapshotInProgress and its finalizer), the VM's status.volumeSnapshotStatuses, paused VMs,
// memory dumps, CDI's StorageProfile snapshot class, snapshots' deletionPolicy Retain beyond
// keeping the content, the virt-launcher's own thaw at the freeze's timeout, KubeVirt's restore
// finalizer and the VM's status.restoreInProgress, restores to a new VM, with volumeRestorePolicy InPlace, overrides,
// patches or targetReadinessPolicy StopTarget (it waits instead), of DataVolume templates or
// instance types, and virtctl's unfreeze (a test clears fsFreezeStatus itself); KubeVirt's virt-launcher pods, its subresources
// (virtctl start, stop, restart, migrate) and its admission webhooks (a migration they would
// refuse at creation, of a VMI that does not exist, has stopped, is not live-migratable or is
// migrating already, is created and then fails, its Event giving the webhook's refusal), the
// start-failure backoff (a VMI that failed to start stays Failed rather than being rerun),
// the other reasons KubeVirt finds a VMI not live-migratable (interfaces, CPU model, host
// devices...), migration policies, limits on parallel migrations, post-copy, the
// decentralized migration's spec.sendTo and spec.receive (such a migration is played as a
// local one), and the garbage collection of finished migrations; CDI DataVolumes
// (a dataVolume volume is read as the claim of the same name); snapshot groups, pre-provisioned
// snapshot contents and cross-namespace data sources; the Job features podFailurePolicy,
// successPolicy, indexed completion, parallelism above one, suspend and ttlSecondsAfterFinished;
// node heartbeats and the namespace controller (a deleted namespace stays Terminating). A site
// keeps its processes in memory: a pod left Running by a site that stopped is failed by the
// next one (ContainerStatusUnknown), as a kubelet does with a container it lost.
//
// Faults are injected through Options, and each one makes the real thing fail for real: a copy
// gets a target too small for its source and nodewright-copy refuses it with its own result, a
// clone's file gets one byte flipped, a VMI fails to start, a live migration fails or is held
// running (FailMigration, HoldMigration), a guest's freeze or thaw fails or a VM's snapshot is
// held (FailFreeze, FailThaw, HoldSnapshot). Nothing reports a result that did not happen.
package site
