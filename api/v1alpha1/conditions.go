package v1alpha1

// Condition types, in one place so that the controllers, the CLI and the UI agree on them.
const (
	// ConditionObserved: the legacy ConfigMap was read (NodewrightCluster).
	ConditionObserved = "Observed"
	// ConditionStateRecognized: the legacy state and its keys parsed (NodewrightCluster).
	ConditionStateRecognized = "StateRecognized"
	// ConditionHeartbeatsFresh: every managed node's heartbeat is fresh (NodewrightCluster).
	ConditionHeartbeatsFresh = "HeartbeatsFresh"
	// ConditionDaemonSetAvailable: the legacy DaemonSet has all its pods ready
	// (NodewrightCluster).
	ConditionDaemonSetAvailable = "DaemonSetAvailable"
	// ConditionHeartbeatFresh: the node's heartbeat is fresh (NodewrightAgentStatus).
	ConditionHeartbeatFresh = "HeartbeatFresh"
	// ConditionStorageHealthy: every DRBD resource on the node is connected and up to date
	// (NodewrightAgentStatus).
	ConditionStorageHealthy = "StorageHealthy"
	// ConditionHostObserved: the agent read every fact of its host it reports: the OS and,
	// when it has one to watch, the storage bond (NodewrightAgentStatus).
	ConditionHostObserved = "HostObserved"
	// ConditionSignatureVerified: the EdgeProfile's signature matches its spec (EdgeProfile).
	ConditionSignatureVerified = "SignatureVerified"
	// ConditionManagementApplied: the management mode spec.management asks for is in effect
	// and holds (True: Observing, or HandedOver to Managed with no legacy pod), or not, and
	// why (False: HandoverRefused, LegacyDaemonSetRunning) (NodewrightCluster).
	ConditionManagementApplied = "ManagementApplied"
	// ConditionProfileApplied: the EdgeProfile named by spec.profileRef exists, its signature
	// verified against a trusted key, it is not a downgrade, and its names and thresholds are
	// in force (NodewrightCluster).
	ConditionProfileApplied = "ProfileApplied"
	// ConditionSucceeded: the workflow finished every step (True), is still running or
	// rolling back (Unknown), or a step failed (False, with the step in the reason)
	// (VMVolumeMigration).
	ConditionSucceeded = "Succeeded"
	// ConditionHeld: a gate holds the workflow's next step (True, the gate in the reason),
	// or none does (False, GatesOpen) (BondModeFlipPlan, ReplicationUpgrade).
	ConditionHeld = "Held"
	// ConditionCleanedUp: a finished workflow has tidied up after itself (True), or is still
	// at it (False, the message saying what it waits for) (every workflow kind).
	ConditionCleanedUp = "CleanedUp"
	// ConditionVerified: the target's digest, read back from disk, equals the source's
	// (VMVolumeMigration).
	ConditionVerified = "Verified"
)

// Condition reasons, CamelCase as metav1.Condition requires.
const (
	ReasonConfigMapRead       = "ConfigMapRead"
	ReasonConfigMapNotFound   = "ConfigMapNotFound"
	ReasonStateParsed         = "StateParsed"
	ReasonInvalidLegacyData   = "InvalidLegacyData"
	ReasonNotObserved         = "NotObserved"
	ReasonHeartbeatsFresh     = "HeartbeatsFresh"
	ReasonHeartbeatsStale     = "HeartbeatsStale"
	ReasonNoNodes             = "NoNodes"
	ReasonDaemonSetNotFound   = "DaemonSetNotFound"
	ReasonPodsNotReady        = "PodsNotReady"
	ReasonAllPodsReady        = "AllPodsReady"
	ReasonHeartbeatFresh      = "HeartbeatFresh"
	ReasonHeartbeatStale      = "HeartbeatStale"
	ReasonNoHeartbeat         = "NoHeartbeat"
	ReasonDRBDHealthy         = "DRBDHealthy"
	ReasonDRBDDegraded        = "DRBDDegraded"
	ReasonDRBDNotReported     = "DRBDNotReported"
	ReasonLegacyWarningEvent  = "LegacyWarning"
	ReasonNodeNoLongerManaged = "NodeNoLongerManaged"
	ReasonInProgress          = "InProgress"
	ReasonRollingBack         = "RollingBack"
	ReasonSucceeded           = "Succeeded"
	ReasonCancelled           = "Cancelled"
	// ReasonAPIsMissing: a workflow waits to start because the cluster does not serve an API
	// it needs (VMVolumeMigration: KubeVirt's, the CSI snapshot API).
	ReasonAPIsMissing = "APIsMissing"
	// The CleanedUp condition's reasons.
	ReasonCleaningUp = "CleaningUp"
	ReasonCleanedUp  = "CleanedUp"
	// The gates of a cluster-wide workflow (the Held condition's reasons).
	ReasonGatesOpen              = "GatesOpen"
	ReasonAnotherWorkflowRunning = "AnotherWorkflowRunning"
	ReasonClusterNotReady        = "ClusterNotReady"
	ReasonAwaitingApproval       = "AwaitingApproval"
	ReasonOutsideWindow          = "OutsideMaintenanceWindow"
	// ReasonNotManaged: the cluster is not in the Managed mode (spec.management Observe, or
	// the handover has not taken effect): the legacy DaemonSet decides about the nodes.
	ReasonNotManaged = "NotManaged"
	// The ManagementApplied condition's reasons: spec.management is Observe, in effect (True);
	// the switch to Managed took effect (True); it was refused (False: a node's agent does not
	// report, or the legacy DaemonSet has pods); or, once Managed, the legacy DaemonSet has
	// pods again (False).
	ReasonObserving              = "Observing"
	ReasonHandoverRefused        = "HandoverRefused"
	ReasonHandedOver             = "HandedOver"
	ReasonLegacyDaemonSetRunning = "LegacyDaemonSetRunning"
	ReasonChecksumMatch          = "ChecksumMatch"
	ReasonChecksumMismatch       = "ChecksumMismatch"
	// EdgeProfile signature and application.
	ReasonSignatureValid    = "SignatureValid"
	ReasonUnsigned          = "Unsigned"
	ReasonSignatureInvalid  = "SignatureInvalid"
	ReasonNoTrustedKeys     = "NoTrustedKeys"
	ReasonProfileApplied    = "Applied"
	ReasonProfileNotFound   = "ProfileNotFound"
	ReasonProfileDowngrade  = "Downgrade"
	ReasonProfileUnverified = "SignatureNotVerified"
)

// The reasons of the agent's conditions on its NodewrightAgentStatus.
const (
	// ReasonDRBDNotLoaded: the node's kernel has no DRBD module loaded (no /proc/drbd)
	// (StorageHealthy, Unknown).
	ReasonDRBDNotLoaded = "DRBDNotLoaded"
	// ReasonDRBDUnreadable: drbdsetup status failed, or its answer could not be read
	// (StorageHealthy, Unknown).
	ReasonDRBDUnreadable = "DRBDUnreadable"
	// HostObserved: read, or what could not be.
	ReasonHostObserved    = "Observed"
	ReasonBondNotObserved = "BondNotObserved"
	ReasonOSNotObserved   = "OSNotObserved"
	// ReasonSystemdUnitsNotObserved: the systemd units the BootRecoveryPolicy names could
	// not be read (HostObserved, False).
	ReasonSystemdUnitsNotObserved = "SystemdUnitsNotObserved"
)
