package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

const snapshotRestoreHelp = `Restore VM from SNAPSHOT, a snapshot a VMSnapshotPolicy made of it (snapshot list), through
KubeVirt's VirtualMachineRestore: KubeVirt gives the VM new claims, copies of the snapshot's
volumes, in place of its disks. Its old claims stay, for you to delete once the VM runs well.

The VM must be stopped first (virtctl stop VM): the restore is refused while it runs, here
and by the operator's admission, and KubeVirt fails it (targetReadinessPolicy FailImmediate)
if the VM is started before the restore is done. Only a snapshot its policy judges good is
restored. The operator's admission records the restore in the audit trail under your name.

With --wait, follow the restore until KubeVirt completes or fails it, then start the VM
yourself (virtctl start VM).

Exit codes: 0 created (with --wait: complete), 1 refused or failed, 2 usage, 3 --timeout
passed first.`

const snapshotRestoreExamples = `  virtctl stop web -n apps
  kubectl nodewright snapshot restore web nightly-web-20261130-0230 -n apps --wait
  virtctl start web -n apps`

func newSnapshotRestoreCommand(f *Factory) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:               "restore VM SNAPSHOT",
		Short:             "Restore a stopped VM from a good snapshot its policy made, through a VirtualMachineRestore",
		Long:              snapshotRestoreHelp,
		Example:           snapshotRestoreExamples,
		ValidArgsFunction: noCompletion,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErrorf("%s wants VM and SNAPSHOT, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			r, err := CreateSnapshotRestore(cmd.Context(), c, namespace, args[0], args[1], f.Now())
			if err != nil {
				return err
			}
			out := f.Streams().Out
			fmt.Fprintf(out, "VirtualMachineRestore %s created: VM %s is restored from %s.\n", r.Name, args[0], args[1])
			if !o.wait {
				_, err := fmt.Fprintf(out, "Follow it: kubectl get virtualmachinerestore %s -n %s -w\n", r.Name, namespace)
				return err
			}
			return waitForRestore(cmd.Context(), f, c, r, o.timeout)
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Follow the restore until KubeVirt completes it (exit 0) or fails it (exit 1).")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "With --wait, give up after this long (e.g. 10m) with exit code 3; 0 waits for ever.")
	return cmd
}

// CreateSnapshotRestore creates the VirtualMachineRestore of vm from snapshot, after checking
// what the operator's admission checks too (the snapshot a policy's, of this VM, the VM
// stopped) and that the snapshot's policy judges it good.
func CreateSnapshotRestore(ctx context.Context, c client.Client, namespace, vm, snapshot string, now time.Time) (*snapv1.VirtualMachineRestore, error) {
	_, snaps, err := listPolicySnapshots(ctx, c, namespace, vm, now)
	if err != nil {
		return nil, err
	}
	var found *policySnapshot
	for i := range snaps {
		if snaps[i].snap.Name == snapshot {
			found = &snaps[i]
		}
	}
	switch {
	case found == nil:
		return nil, fmt.Errorf("%s is not a snapshot a VMSnapshotPolicy of namespace %s made of VM %s (kubectl nodewright snapshot list %s -n %s)",
			snapshot, namespace, vm, vm, namespace)
	case found.earlierVM:
		return nil, fmt.Errorf("%s is a snapshot of an earlier VM named %s, deleted since: it is not restored onto this one", snapshot, vm)
	case found.judgement.State != vmsnapshot.Good:
		state := found.judgement.State.String()
		if found.stuck {
			state += " (stuck)"
		}
		return nil, fmt.Errorf("%s is %s, not good (%s): only a good snapshot is restored", snapshot, state, found.judgement.Reason)
	}
	vmi := &virtv1.VirtualMachineInstance{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: vm}, vmi); {
	case err == nil:
		return nil, fmt.Errorf("VM %s runs (its VirtualMachineInstance is %s): stop it first (virtctl stop %s -n %s); a restore replaces its disks",
			vm, vmi.Status.Phase, vm, namespace)
	case !apierrors.IsNotFound(err):
		return nil, apiError(err, "virtualmachineinstances", vm)
	}
	r := &snapv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{
			Name: children.Name(snapshot, "restore-"+now.UTC().Format("20060102-150405")), Namespace: namespace,
			Labels: map[string]string{nwv1.LabelSnapshotPolicy: children.LabelValue(found.policy), nwv1.LabelSnapshotVM: children.LabelValue(vm)},
		},
		Spec: snapv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: ptr.To(virtv1.GroupVersion.Group), Kind: "VirtualMachine", Name: vm},
			VirtualMachineSnapshotName: snapshot,
			// The VM was stopped: started before the restore is done, it fails rather than waits.
			TargetReadinessPolicy: ptr.To(snapv1.VirtualMachineRestoreFailImmediate),
		},
	}
	if err := c.Create(ctx, r); err != nil {
		return nil, apiError(err, "virtualmachinerestores", r.Name)
	}
	return r, nil
}

// waitForRestore follows the restore, saying each new step KubeVirt reports, until it is
// complete or failed, or the timeout passes.
func waitForRestore(ctx context.Context, f *Factory, c client.Client, r *snapv1.VirtualMachineRestore, timeout time.Duration) error {
	out := f.Streams().Out
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	said := ""
	var last *snapv1.VirtualMachineRestore
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		got := &snapv1.VirtualMachineRestore{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(r), got); err != nil {
			switch {
			case apierrors.IsNotFound(err):
				return false, fmt.Errorf("VirtualMachineRestore %s was deleted", r.Name)
			case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
				return false, apiError(err, "virtualmachinerestores", r.Name)
			}
			return false, nil // tried again: the API server may be busy
		}
		last = got
		if st := got.Status; st != nil {
			if ready := restoreCondition(st, snapv1.ConditionReady); ready != nil && ready.Reason != said {
				said = ready.Reason
				fmt.Fprintf(out, "  %s\n", shown(oneLine(said)))
			}
			if ptr.Deref(st.Complete, false) {
				return true, nil
			}
			if failed := restoreCondition(st, snapv1.ConditionFailure); failed != nil && failed.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("VirtualMachineRestore %s failed: %s", r.Name, shown(oneLine(failed.Reason)))
			}
		}
		return false, nil
	})
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && timeout > 0:
		return &ExitError{Code: ExitNotFinished, Err: fmt.Errorf("--timeout %s passed waiting for VirtualMachineRestore %s", timeout, r.Name)}
	default:
		return err
	}
	for _, v := range last.Status.Restores {
		fmt.Fprintf(out, "Volume %s restored on claim %s (from VolumeSnapshot %s).\n", shown(v.VolumeName), shown(v.PersistentVolumeClaimName), shown(v.VolumeSnapshotName))
	}
	_, err = fmt.Fprintf(out, "Restore complete. Start the VM: virtctl start %s -n %s\n", r.Spec.Target.Name, r.Namespace)
	return err
}

func restoreCondition(st *snapv1.VirtualMachineRestoreStatus, t snapv1.ConditionType) *snapv1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
