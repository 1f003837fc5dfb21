package cli

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The self-service requests of a VM's owner (docs/selfservice.md): one subcommand per
// operation creates a VMOperationRequest; list, watch and approve read and approve them.

const requestHelp = `Ask Nodewright for one safe operation on a VM of the namespace (-n, or the context's), as its
owner, with a VMOperationRequest (docs/selfservice.md): a snapshot now, a restore from one of
the VM's own snapshots, a restart, or a move of one of its volumes to another StorageClass.

The admission webhook writes who asked (spec.requester: you, as the API server authenticated
you) and refuses what the SelfServicePolicy does not offer, or what you could not do to the VM
yourself; the refusal is printed as the webhook wrote it. A request admitted waits for what
holds it (an administrator's approval, the maintenance window, the rate, the namespace's
queue, node work), then runs. "request list" lists the requests, "request watch" follows one,
"request approve" approves one that waits for an administrator.`

const requestExamples = `  # Snapshot VM web now, and follow the request to its end
  kubectl nodewright request snapshot web --reason "before the upgrade" -n team-a --wait

  # Restore web from one of its own snapshots
  kubectl nodewright request restore web before-upgrade-snapshot --reason "the upgrade broke the database" -n team-a

  # The namespace's requests, and one followed until it ends
  kubectl nodewright request list -n team-a
  kubectl nodewright request watch web-restore-x7k2p -n team-a`

// requestKind is the kind as messages name it.
const requestKind = "vmoperationrequest"

// requestReasonMax is the CRD's maxLength of spec.reason, checked here so that the error names
// the flag.
const requestReasonMax = 1024

// requestOperation is one operation's subcommand.
type requestOperation struct {
	op nwv1.VMOperation
	// word names the subcommand and, in a generated name, the operation: restore.
	word    string
	aliases []string
	// args are the positional arguments after VM: SNAPSHOT, VOLUME.
	args                  []string
	short, long, examples string
	// params turns the arguments after VM and the flags into the operation's parameters.
	params func(args []string, o *requestOptions) (nwv1.VMOperationParams, error)
}

// requestOptions are the flags of a request's creation.
type requestOptions struct {
	reason, name, to, output string
	wait                     waitOptions
}

// requestExitCodes closes the help of each operation's subcommand.
const requestExitCodes = `Exit codes: 0 created (with --wait: Succeeded); 1 refused (the webhook's reason) or, with
--wait, ended Failed or Refused, or was deleted; 2 usage; 3 --wait ended before the request did
(--timeout, or interrupted).`

const requestCreated = `The command prints the request it created, with the requester the webhook wrote; with --wait
it follows the request as "request watch --wait" does, one line each time its status changes.`

var requestOperations = []requestOperation{
	{
		op: nwv1.VMSnapshotNow, word: "snapshot", aliases: []string{"snapshot-now"},
		short: "Ask for a snapshot of a VM now (a VMOperationRequest SnapshotNow)",
		long: `Ask for a VirtualMachineSnapshot of VM now (operation SnapshotNow). Nodewright makes it, named
<request>-snapshot, and judges it by the rules of the VMSnapshotPolicy that selects the VM (or
the defaults: GuestAgent, 10m); a snapshot judged failed fails the request.`,
		examples: `  kubectl nodewright request snapshot web --reason "before the upgrade" -n team-a
  kubectl nodewright request snapshot web --reason "before the upgrade" -n team-a --wait --timeout 30m`,
		params: func([]string, *requestOptions) (nwv1.VMOperationParams, error) { return nwv1.VMOperationParams{}, nil },
	},
	{
		op: nwv1.VMRestore, word: "restore", args: []string{"SNAPSHOT"},
		short: "Ask for a restore of a VM from one of its own snapshots (a VMOperationRequest Restore)",
		long: `Ask for a restore of VM from SNAPSHOT, one of its own VirtualMachineSnapshots judged good
(operation Restore). Nodewright stops the VM, restores it with a VirtualMachineRestore named
<request>-restore, and gives it back the run strategy it had.`,
		examples: `  kubectl nodewright request restore web before-upgrade-snapshot --reason "the upgrade broke the database" -n team-a
  kubectl nodewright request restore web before-upgrade-snapshot --reason "the upgrade broke the database" -n team-a --wait`,
		params: func(args []string, _ *requestOptions) (nwv1.VMOperationParams, error) {
			return nwv1.VMOperationParams{Snapshot: args[0]}, nil
		},
	},
	{
		op: nwv1.VMRestart, word: "restart",
		short: "Ask for a restart of a running VM (a VMOperationRequest Restart)",
		long: `Ask for a restart of VM (operation Restart): Nodewright stops it (run strategy Halted) and gives
it back its run strategy; the request is done when a new VirtualMachineInstance runs. Only a
running VM whose run strategy starts it again (Always, RerunOnFailure) is restarted.`,
		examples: `  kubectl nodewright request restart web --reason "the guest hangs" -n team-a
  kubectl nodewright request restart web --reason "the guest hangs" -n team-a --name web-hangs --wait`,
		params: func([]string, *requestOptions) (nwv1.VMOperationParams, error) { return nwv1.VMOperationParams{}, nil },
	},
	{
		op: nwv1.VMMigrateVolume, word: "migrate", aliases: []string{"migrate-volume", "move-volume"}, args: []string{"VOLUME"},
		short: "Ask for a move of a VM's volume to another StorageClass (a VMOperationRequest MigrateVolume)",
		long: `Ask for a move of volume VOLUME of VM (its name in the VM's spec.template.spec.volumes) to
StorageClass --to, one the SelfServicePolicy lists (operation MigrateVolume). Nodewright makes
a VMVolumeMigration named <request>-migration (docs/migration.md): Hot where the source's
backend can clone within its CSI driver, else Cold. An administrator moves a volume directly
with "kubectl nodewright migrate".`,
		examples: `  kubectl nodewright request migrate web root --to linstor-replicated --reason "needs replicas" -n team-a
  kubectl nodewright request migrate web root --to linstor-replicated --reason "needs replicas" -n team-a --wait`,
		params: func(args []string, o *requestOptions) (nwv1.VMOperationParams, error) {
			if o.to == "" {
				return nwv1.VMOperationParams{}, usageErrorf("--to CLASS is required: the StorageClass to move volume %s to", args[0])
			}
			return nwv1.VMOperationParams{Volume: args[0], StorageClass: o.to}, nil
		},
	},
}

func newRequestCommand(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "request",
		Aliases: []string{"requests", "vmopr"},
		Short:   "A VM owner's requests (VMOperationRequests): snapshot, restore, restart, migrate a volume; list, watch, approve",
		Long:    requestHelp,
		Example: requestExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown operation %q for %q: want %s (or list, watch, approve)", args[0], cmd.CommandPath(), requestWords())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	for _, op := range requestOperations {
		cmd.AddCommand(newRequestOperationCommand(f, op))
	}
	cmd.AddCommand(newRequestListCommand(f), newRequestWatchCommand(f), newRequestApproveCommand(f))
	return cmd
}

// requestWords names the operations' subcommands, for the usage error: "snapshot, restore,
// restart or migrate".
func requestWords() string {
	words := mapSlice(requestOperations, func(op requestOperation) string { return op.word })
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

func newRequestOperationCommand(f *Factory, op requestOperation) *cobra.Command {
	o := &requestOptions{}
	use := strings.Join(append([]string{op.word, "VM"}, op.args...), " ")
	if op.op == nwv1.VMMigrateVolume {
		use += " --to CLASS"
	}
	names := strings.Join(append([]string{"VM"}, op.args...), " and ")
	cmd := &cobra.Command{
		Use:               use + " [--reason TEXT]",
		Aliases:           op.aliases,
		Short:             op.short,
		Long:              op.long + "\n\n" + requestCreated + "\n\n" + requestExitCodes,
		Example:           op.examples,
		Args:              exactArgs(1+len(op.args), names),
		ValidArgsFunction: completeRequestArgs(f, op.op),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			r, err := buildRequest(op, o, args, namespace)
			if err != nil {
				return err
			}
			return createAndFollow(cmd.Context(), f, r, requestKind, "request", o.output, o.wait, func() string { return describeRequest(r) },
				func(ctx context.Context, c client.WithWatch) error {
					return watchRequest(ctx, f, c, namespace, r.Name, o.wait)
				})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.reason, "reason", "", fmt.Sprintf("Why you ask, for the audit trail and the administrator who approves (at most %d characters).", requestReasonMax))
	fl.StringVar(&o.name, "name", "", "Name of the VMOperationRequest. Default: VM-"+op.word+"- and five random characters.")
	if op.op == nwv1.VMMigrateVolume {
		fl.StringVar(&o.to, "to", "", "The StorageClass to move the volume to, one the SelfServicePolicy lists (required).")
		_ = cmd.RegisterFlagCompletionFunc("to", completeStorageClasses(f))
	}
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML)
	addRequestWaitFlags(cmd, &o.wait)
	return cmd
}

// addRequestWaitFlags registers --wait and --timeout with what they mean for a request.
func addRequestWaitFlags(cmd *cobra.Command, o *waitOptions) {
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Follow the request until it ends; exit 0 if it Succeeded, 1 if it ended Failed or Refused, 3 if --timeout passed first.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "With --wait, give up after this long (e.g. 30m, 2h) with exit code 3; 0 waits for ever.")
}

// buildRequest turns the arguments and flags into the request to create; mistakes in them are
// usage errors. spec.requester is left to the admission webhook, which writes it whatever the
// request says.
func buildRequest(op requestOperation, o *requestOptions, args []string, namespace string) (*nwv1.VMOperationRequest, error) {
	for i, name := range append([]string{"VM"}, op.args...) {
		if args[i] == "" {
			return nil, usageErrorf("%s is empty", name)
		}
	}
	if n := utf8.RuneCountInString(o.reason); n > requestReasonMax {
		return nil, usageErrorf("--reason: %d characters, at most %d", n, requestReasonMax)
	}
	params, err := op.params(args[1:], o)
	if err != nil {
		return nil, err
	}
	r := &nwv1.VMOperationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: o.name},
		Spec:       nwv1.VMOperationRequestSpec{Operation: op.op, VM: args[0], Params: params, Reason: o.reason},
	}
	if r.Name == "" {
		r.Name = generatedName(args[0], op.word)
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return nil, usageErrorf("--name %q: %s", r.Name, strings.Join(errs, "; "))
	}
	return r, nil
}

// describeRequest is one line saying what a request asks, and who asked when the webhook
// wrote it. The names and the requester are the requester's words: shown.
func describeRequest(r *nwv1.VMOperationRequest) string {
	s := r.Spec
	text := fmt.Sprintf("%s of VM %s", s.Operation, shown(s.VM))
	switch s.Operation {
	case nwv1.VMRestore:
		text += " from snapshot " + shown(s.Params.Snapshot)
	case nwv1.VMMigrateVolume:
		text += fmt.Sprintf(", volume %s to StorageClass %s", shown(s.Params.Volume), shown(s.Params.StorageClass))
	}
	if s.Requester != nil && s.Requester.Username != "" {
		text += ", asked by " + shown(s.Requester.Username)
	}
	return text
}

// completeRequestArgs completes VM, then a Restore's SNAPSHOT from the VM's snapshots, and a
// MigrateVolume's VOLUME from the VM's volumes.
func completeRequestArgs(f *Factory, op nwv1.VMOperation) cobra.CompletionFunc {
	vms := completeVMs(f)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		switch {
		case len(args) == 0:
			return vms(cmd, args, toComplete)
		case len(args) > 1:
			return nil, none
		case op == nwv1.VMRestore:
			return completeVMSnapshots(f, args[0], toComplete)
		case op == nwv1.VMMigrateVolume:
			return completeVMVolumes(f, args[0], toComplete)
		}
		return nil, none
	}
}

// completeVMSnapshots completes the names of the VirtualMachineSnapshots of vm.
func completeVMSnapshots(f *Factory, vm, toComplete string) ([]string, cobra.ShellCompDirective) {
	snaps := &snapv1.VirtualMachineSnapshotList{}
	_, directive := completeNames(f, snaps, true, toComplete) // fills snaps, or leaves it empty
	var out []string
	for _, s := range snaps.Items {
		if s.Spec.Source.Name == vm && strings.HasPrefix(s.Name, toComplete) {
			out = append(out, s.Name)
		}
	}
	return out, directive
}

// completeVMVolumes completes the names of vm's volumes.
func completeVMVolumes(f *Factory, vm, toComplete string) ([]string, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	c, err := f.Client()
	if err != nil {
		return nil, none
	}
	namespace, _, err := f.Namespace()
	if err != nil {
		return nil, none
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	got := &virtv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: vm}, got); err != nil || got.Spec.Template == nil {
		return nil, none
	}
	var out []string
	for _, v := range got.Spec.Template.Spec.Volumes {
		if strings.HasPrefix(v.Name, toComplete) {
			out = append(out, v.Name)
		}
	}
	return out, none
}

// completeRequests completes the one argument, the name of a request of the namespace.
func completeRequests(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeNames(f, &nwv1.VMOperationRequestList{}, true, toComplete)
	}
}
