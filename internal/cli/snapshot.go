package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// The snapshot view of a namespace's VMSnapshotPolicies (docs/snapshots.md): each policy, and
// each VM's snapshots that a policy made, judged as the policy judges them. The snapshots'
// status is KubeVirt's, written from what the VMs' guests and storage did: the table prints
// each text through shown.

const snapshotHelp = `The VM snapshots of a namespace's VMSnapshotPolicies (docs/snapshots.md): "snapshot list"
shows each policy and each VM's snapshots, judged as the policy judges them; "snapshot
restore" restores a stopped VM from a good one, through KubeVirt's VirtualMachineRestore.`

const snapshotExamples = `  kubectl nodewright snapshot list -n apps
  kubectl nodewright snapshot list web -n apps
  kubectl nodewright snapshot restore web nightly-web-20261130-0230 -n apps --wait`

const snapshotListHelp = `List the VMSnapshotPolicies of the namespace (-n, or the context's), then the snapshots they
made, one line each, newest first per VM; with VM, that VM's alone:

  POLICY     the policy; its schedule and time zone, the VMs it selects, the good snapshots
             it keeps, Healthy, the next run, the newest run that made no snapshot and why
  VM         the VM the snapshot is of
  SNAPSHOT   the VirtualMachineSnapshot
  SCHEDULED  the run that made it
  STATE      Good (noGuestAgent: crash-consistent, without the guest agent's freeze),
             InProgress, or Failed, as the policy judges it (docs/snapshots.md, "What good
             means"), its failure deadline included; (stuck): Succeeded, not good past it
  WHY        why it is not good

A VM "(earlier)" is an earlier VM of that name, deleted and made again: the policy leaves its
snapshots alone.

-o json and -o yaml print the snapshots as a VirtualMachineSnapshotList.

Exit codes: 0 listed (also when there are none), 1 a list cannot be read, 2 usage.`

const snapshotListExamples = `  kubectl nodewright snapshot list -n apps
  kubectl nodewright snapshot list web -n apps

  # The names of web's snapshots, newest first, for kubectl get
  kubectl nodewright snapshot list web -n apps -o json | jq -r '.items[].metadata.name'`

func newSnapshotCommand(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots"},
		Short:   "The VM snapshots of VMSnapshotPolicies: list, restore",
		Long:    snapshotHelp,
		Example: snapshotExamples,
		Args:    noArgs,
	}
	cmd.AddCommand(newSnapshotListCommand(f), newSnapshotRestoreCommand(f))
	return cmd
}

// policySnapshot is a snapshot a policy made, as the policy judges it.
type policySnapshot struct {
	policy, vm string
	snap       *snapv1.VirtualMachineSnapshot
	scheduled  time.Time
	judgement  vmsnapshot.Judgement
	// stuck: Succeeded, not good past its failure deadline (vmsnapshot.Made.Stuck).
	stuck bool
	// earlierVM: of an earlier VM of the same name, which the policy leaves alone.
	earlierVM bool
}

func newSnapshotListCommand(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list [VM]",
		Aliases: []string{"ls"},
		Short:   "The namespace's snapshot policies, and each VM's snapshots: scheduled, state, why",
		Long:    snapshotListHelp,
		Example: snapshotListExamples,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			var vm string
			if len(args) == 1 {
				vm = args[0]
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			policies, snaps, err := listPolicySnapshots(cmd.Context(), c, namespace, vm, f.Now())
			if err != nil {
				return err
			}
			out := f.Streams().Out
			if output != outputTable {
				list := &snapv1.VirtualMachineSnapshotList{}
				for _, s := range snaps {
					list.Items = append(list.Items, *s.snap)
				}
				list.SetGroupVersionKind(snapv1.SchemeGroupVersion.WithKind("VirtualMachineSnapshotList"))
				return printObjects(out, output, list)
			}
			if len(policies) == 0 {
				fmt.Fprintf(f.Streams().ErrOut, "No VMSnapshotPolicies found in namespace %s.\n", namespace)
				return nil
			}
			p := palette{on: f.Color(out)}
			if err := snapshotPolicyTable(policies, f.Now()).write(out, p); err != nil {
				return err
			}
			fmt.Fprintln(out)
			if len(snaps) == 0 {
				what := "the policies"
				if vm != "" {
					what = "VM " + vm
				}
				_, err := fmt.Fprintf(out, "No snapshots of %s yet.\n", what)
				return err
			}
			return snapshotTable(snaps).write(out, p)
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	return cmd
}

// listPolicySnapshots reads the namespace's policies and the snapshots they made (of vm alone
// when given), each judged as its policy judges it, by VM and newest first.
func listPolicySnapshots(ctx context.Context, c client.Client, namespace, vm string, now time.Time) ([]nwv1.VMSnapshotPolicy, []policySnapshot, error) {
	var policies nwv1.VMSnapshotPolicyList
	if err := c.List(ctx, &policies, client.InNamespace(namespace)); err != nil {
		return nil, nil, apiError(err, "vmsnapshotpolicies", "")
	}
	slices.SortFunc(policies.Items, func(a, b nwv1.VMSnapshotPolicy) int { return strings.Compare(a.Name, b.Name) })
	if len(policies.Items) == 0 {
		return nil, nil, nil
	}
	opts := []client.ListOption{client.InNamespace(namespace), client.HasLabels{nwv1.LabelSnapshotPolicy}}
	if vm != "" {
		opts = append(opts, client.MatchingLabels{nwv1.LabelSnapshotVM: children.LabelValue(vm)})
	}
	var list snapv1.VirtualMachineSnapshotList
	if err := c.List(ctx, &list, opts...); err != nil {
		if meta.IsNoMatchError(err) {
			return policies.Items, nil, nil
		}
		return nil, nil, apiError(err, "virtualmachinesnapshots", "")
	}
	var vms virtv1.VirtualMachineList
	vmUIDs := map[string]string{}
	if err := c.List(ctx, &vms, client.InNamespace(namespace)); err == nil {
		for _, vm := range vms.Items {
			vmUIDs[vm.Name] = string(vm.UID)
		}
	} else if !meta.IsNoMatchError(err) {
		return nil, nil, apiError(err, "virtualmachines", "")
	}
	var out []policySnapshot
	for i := range list.Items {
		s := &list.Items[i]
		if vm != "" && s.Spec.Source.Name != vm {
			continue
		}
		// Only a snapshot its policy made: by the label and the policy's UID.
		p := vmsnapshot.PolicyOf(s, policies.Items)
		if p == nil {
			continue
		}
		var content *snapv1.VirtualMachineSnapshotContent
		if s.Status != nil && s.Status.VirtualMachineSnapshotContentName != nil {
			got := &snapv1.VirtualMachineSnapshotContent{}
			err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: *s.Status.VirtualMachineSnapshotContentName}, got)
			switch {
			case err == nil:
				content = got
			case !apierrors.IsNotFound(err):
				return nil, nil, apiError(err, "virtualmachinesnapshotcontent", *s.Status.VirtualMachineSnapshotContentName)
			}
		}
		m := vmsnapshot.JudgedBy(p, s, content, now)
		ps := policySnapshot{policy: p.Name, vm: s.Spec.Source.Name, snap: s, scheduled: m.Scheduled, judgement: m.Judgement, stuck: m.Stuck}
		// The policy leaves alone the snapshots of an earlier VM of the same name.
		if uid, ok := vmUIDs[ps.vm]; ok && s.Annotations[nwv1.AnnotationSnapshotVMUID] != uid {
			ps.earlierVM = true
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b policySnapshot) int {
		return cmp.Or(strings.Compare(a.vm, b.vm), b.scheduled.Compare(a.scheduled), strings.Compare(a.snap.Name, b.snap.Name))
	})
	return policies.Items, out, nil
}

func snapshotPolicyTable(policies []nwv1.VMSnapshotPolicy, now time.Time) *table {
	t := &table{header: []string{"POLICY", "SCHEDULE", "VMS", "KEPT", "HEALTHY", "NEXT RUN", "LAST SKIPPED"}}
	for i := range policies {
		p := &policies[i]
		schedule := p.Spec.Schedule.Cron
		if tz := p.Spec.Schedule.TimeZone; tz != "" && tz != "UTC" {
			schedule += " (" + tz + ")"
		}
		healthy := "-"
		hs := plain
		if cond := meta.FindStatusCondition(p.Status.Conditions, nwv1.ConditionHealthy); cond != nil {
			healthy, hs = string(cond.Status), conditionStyle(cond.Status)
			if cond.Status != "True" {
				healthy += " (" + cond.Reason + ")"
			}
		}
		next := "-"
		switch {
		case p.Spec.Suspend:
			next = "suspended"
		case p.Status.NextRun != nil:
			next = "in " + p.Status.NextRun.Sub(now).Round(time.Second).String()
		}
		skipped := "-"
		if s := p.Status.LastSkipped; s != nil {
			skipped = s.Scheduled.UTC().Format(time.RFC3339) + " " + oneLine(s.Reason)
		}
		t.add(c(p.Name), c(shown(schedule)), c(fmt.Sprint(p.Status.Selected)), c(fmt.Sprint(p.Status.Kept)), cs(healthy, hs), c(next), c(shown(skipped)))
	}
	return t
}

func snapshotTable(snaps []policySnapshot) *table {
	t := &table{header: []string{"VM", "POLICY", "SNAPSHOT", "SCHEDULED", "STATE", "WHY"}}
	for _, s := range snaps {
		state, st := s.judgement.State.String(), yellow
		switch s.judgement.State {
		case vmsnapshot.Good:
			st = green
			if s.judgement.NoGuestAgent {
				state += " (noGuestAgent)"
			}
		case vmsnapshot.Failed:
			st = red
		}
		why := s.judgement.Reason
		if s.stuck {
			state += " (stuck)"
			why += "; past its failure deadline: no run waits for it"
		}
		vm := shown(s.vm)
		if s.earlierVM {
			vm += " (earlier)"
			why = strings.TrimPrefix(why+"; of an earlier VM of the name, which the policy leaves alone", "; ")
		}
		t.add(c(vm), c(s.policy), c(s.snap.Name), c(s.scheduled.UTC().Format(time.RFC3339)), cs(state, st), c(dash(shown(oneLine(why)))))
	}
	return t
}
