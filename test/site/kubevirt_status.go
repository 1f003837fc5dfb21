package site

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// vmStatus computes a VirtualMachine's status from its VMI and claims, as virt-controller
// shows it. Fields the site does not play (snapshots, restores, volume requests...) are kept.
func vmStatus(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, strategy virtv1.VirtualMachineRunStrategy,
	claims vmClaims, now metav1.Time) virtv1.VirtualMachineStatus {
	status := *vm.Status.DeepCopy()
	// The strategy virt-controller acted on. KubeVirt starts a RerunOnFailure VM's VMI before
	// its claims exist; the site waits for them, and records the strategy once the VMI is
	// there, so that a VM coming from another strategy still starts (shouldStart).
	if strategy != virtv1.RunStrategyRerunOnFailure || vmi != nil {
		status.RunStrategy = strategy
	}
	status.Created = vmi != nil
	status.Ready = vmi != nil && vmi.Status.Phase == virtv1.Running && vmiReady(vmi)
	status.DesiredGeneration = vm.Generation
	status.StartFailure = nil
	if vmi != nil {
		if g, err := strconv.ParseInt(vmi.Annotations[annVMGeneration], 10, 64); err == nil {
			status.ObservedGeneration = g
		}
	}

	var printable virtv1.VirtualMachinePrintableStatus
	ready := condition{status: corev1.ConditionFalse}
	switch {
	case vmi == nil && shouldStart(vm, strategy) && len(claims.missing) > 0:
		printable = virtv1.VirtualMachineStatusPvcNotFound
		ready.reason, ready.message = "FailedPvcNotFound",
			fmt.Sprintf("PersistentVolumeClaim %s not found in namespace %s", strings.Join(claims.missing, ", "), vm.Namespace)
	case vmi == nil:
		printable = virtv1.VirtualMachineStatusStopped
		ready.reason, ready.message = "VMINotExists", "VMI does not exist"
	case vmi.Status.Phase == virtv1.Running && migrating(vmi):
		printable = virtv1.VirtualMachineStatusMigrating
		ready = condition{status: corev1.ConditionTrue}
	case vmi.Status.Phase == virtv1.Running:
		printable = virtv1.VirtualMachineStatusRunning
		ready = condition{status: corev1.ConditionTrue}
	case vmi.Status.Phase == virtv1.Failed:
		printable = virtv1.VirtualMachineStatusCrashLoopBackOff
		ready.reason, ready.message = "VMIFailed", "the VMI failed to start"
		status.StartFailure = &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1, LastFailedVMIUID: vmi.UID}
	case vmi.Status.Phase == virtv1.Succeeded:
		printable = virtv1.VirtualMachineStatusStopped
		ready.reason, ready.message = "VMIStopped", "the VMI has stopped"
	case unschedulable(vmi) != nil:
		printable = virtv1.VirtualMachineStatusUnschedulable
		ready.reason, ready.message = corev1.PodReasonUnschedulable, unschedulable(vmi).Message
	case len(claims.unbound) > 0:
		printable = virtv1.VirtualMachineStatusWaitingForVolumeBinding
		ready.reason, ready.message = "PodNotExists", "waiting for PVC "+strings.Join(claims.unbound, ", ")+" to be bound"
	default:
		printable = virtv1.VirtualMachineStatusStarting
		ready.reason, ready.message = "PodNotExists", "the VMI is starting"
	}
	status.PrintableStatus = printable
	status.Conditions = setVMCondition(status.Conditions, virtv1.VirtualMachineReady, ready, now)

	restart := condition{status: corev1.ConditionFalse}
	if vmi != nil && vm.Spec.Template != nil && !equality.Semantic.DeepEqual(vmi.Spec.Volumes, vm.Spec.Template.Spec.Volumes) {
		restart = condition{status: corev1.ConditionTrue, reason: "RestartRequired",
			message: "the VM's volumes changed since the VMI started: restart to use them"}
	}
	if restart.status == corev1.ConditionTrue {
		status.Conditions = setVMCondition(status.Conditions, virtv1.VirtualMachineRestartRequired, restart, now)
	} else {
		status.Conditions = removeVMCondition(status.Conditions, virtv1.VirtualMachineRestartRequired)
	}
	return status
}

// unschedulable returns the VMI's PodScheduled condition when no node can take it, else nil.
func unschedulable(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if c := &vmi.Status.Conditions[i]; c.Type == vmiPodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c
		}
	}
	return nil
}

// migrating says whether a live migration of the VMI has started and not ended.
func migrating(vmi *virtv1.VirtualMachineInstance) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.StartTimestamp != nil && ms.EndTimestamp == nil
}

type condition struct {
	status          corev1.ConditionStatus
	reason, message string
}

func vmiReady(vmi *virtv1.VirtualMachineInstance) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setVMCondition sets a condition, moving its transition time only when its status changes.
func setVMCondition(conds []virtv1.VirtualMachineCondition, t virtv1.VirtualMachineConditionType, c condition, now metav1.Time) []virtv1.VirtualMachineCondition {
	out := make([]virtv1.VirtualMachineCondition, 0, len(conds)+1)
	found := false
	for _, existing := range conds {
		if existing.Type == t {
			found = true
			if existing.Status != c.status {
				existing.LastTransitionTime = now
			}
			existing.Status, existing.Reason, existing.Message = c.status, c.reason, c.message
		}
		out = append(out, existing)
	}
	if !found {
		out = append(out, virtv1.VirtualMachineCondition{Type: t, Status: c.status, Reason: c.reason, Message: c.message, LastTransitionTime: now})
	}
	return out
}

func removeVMCondition(conds []virtv1.VirtualMachineCondition, t virtv1.VirtualMachineConditionType) []virtv1.VirtualMachineCondition {
	var out []virtv1.VirtualMachineCondition
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}
