// Package cli is kubectl-nodewright, the kubectl plugin: cobra commands that read and drive
// Nodewright's objects (status, migrate, flip, upgrade, approve, events) and wrap its offline tools (audit,
// profile). cmd/kubectl-nodewright only wires it to the process.
//
// Every command writes to the IOStreams it was given and reports its outcome as an error that
// Execute turns into an exit code (see the Exit constants), so tests drive the whole program
// in-process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
)

// rootHelp is the root command's long help: what the plugin does and the exit codes every
// command keeps.
const rootHelp = `kubectl nodewright shows and drives Nodewright, the operator of small edge storage
clusters: the cluster's health rolled up from the legacy DaemonSet, VM volume migrations,
bond-mode flips, replication upgrades and OS upgrades (os) and the approval of their steps, the Kairos
nodes' boots (boot), the VM snapshots of snapshot policies (snapshot), VM owners' requests
for an operation on their VM (request), the events, the audit
trail and signed EdgeProfiles; against a fleet hub, its member clusters (fleet).

It reads the same kubeconfig, context and namespace flags as kubectl (--kubeconfig,
--context, -n/--namespace, --as, ...).

Exit codes, the same for every command:
  0  done
  1  the operation failed or was refused (the API server's refusal is printed as the
     admission webhook wrote it; approve: nothing to approve, or no right to), or a check
     found a problem (audit verify, profile verify),
     or a migration, flip, upgrade or OS version policy waited on ended Failed or RolledBack, or a
     request waited on ended Failed or Refused, or the folder
     audit tail reads cannot be read
  2  usage error: an unknown command or flag, a wrong number of arguments, a bad value,
     an unreadable file
  3  migrate --wait / migrate watch --wait / flip --wait / flip watch --wait /
     upgrade --wait / upgrade watch --wait / os plan --wait / os watch --wait /
     request ... --wait / request watch --wait: the wait ended before the workflow finished
     (--timeout passed, or it was interrupted)`

const rootExamples = `  # The cluster's phase and why, its nodes, profile and recent warnings
  kubectl nodewright status

  # Move VM web's volume "root" onto the linstor-rwx class and wait for the result
  kubectl nodewright migrate web root --to linstor-rwx -n apps --wait

  # Move every node's storage bond to LACP, one node at a time, and follow it
  kubectl nodewright flip --to 802.3ad --name to-lacp --approval Manual
  kubectl nodewright flip watch to-lacp

  # Replicate the single-node storage onto edge-2, each stage approved by a person
  kubectl nodewright upgrade --peer edge-2 --approval Manual to-two
  kubectl nodewright upgrade watch to-two

  # Each VM's snapshots in namespace apps, good, failed or in progress, and why
  kubectl nodewright snapshot list -n apps

  # As a VM's owner, ask for a snapshot of it now, and follow the request
  kubectl nodewright request snapshot web --reason "before the upgrade" -n apps --wait

  # Approve the step a Manual bond-mode flip waits on
  kubectl nodewright approve bondmodeflipplan/to-lacp

  # The legacy DaemonSet's Events and Nodewright's, merged, newest last
  kubectl nodewright events -A --warnings-only

  # A fleet hub's member clusters, degraded first, and the context to act on each with
  kubectl nodewright fleet --context hub

  # Shell completion
  source <(kubectl-nodewright completion bash)`

// Factory gives commands what the root's standard flags describe: the connection to the
// API server, the namespace, the output streams and whether to colour them.
type Factory struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	noColor bool

	// Now is the clock; tests replace it.
	Now func() time.Time
	// IsTerminal reports whether a stream is a terminal; tests replace it.
	IsTerminal func(any) bool
	// Getenv reads the environment (NO_COLOR); tests replace it.
	Getenv func(string) string
}

// Streams are the command's standard input, output and error.
func (f *Factory) Streams() genericiooptions.IOStreams { return f.streams }

// RESTConfig is the connection the kubeconfig flags describe. Warnings the API server passes
// on (from admission webhooks, say) are written to standard error as kubectl writes them.
func (f *Factory) RESTConfig() (*rest.Config, error) {
	cfg, err := f.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NewWarningWriter(f.streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	cfg.WarningHandlerWithContext = nil
	return cfg, nil
}

// Namespace is the namespace the flags or the kubeconfig context name ("default" when
// neither does), and whether it was given with -n/--namespace.
func (f *Factory) Namespace() (namespace string, explicit bool, err error) {
	return f.flags.ToRawKubeConfigLoader().Namespace()
}

// Color reports whether output to w is coloured: w is a terminal, and neither --no-color
// nor $NO_COLOR says otherwise.
func (f *Factory) Color(w any) bool {
	return !f.noColor && f.Getenv("NO_COLOR") == "" && f.IsTerminal(w)
}

// The factories of the roots NewRootCommand made, for AddCommand.
var (
	factoriesMu sync.Mutex
	factories   = map[*cobra.Command]*Factory{}
)

// NewRootCommand builds the kubectl-nodewright command tree writing to streams.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	f := &Factory{
		flags:      genericclioptions.NewConfigFlags(true),
		streams:    streams,
		Now:        time.Now,
		IsTerminal: isTerminal,
		Getenv:     os.Getenv,
	}
	root := &cobra.Command{
		Use:     "kubectl-nodewright",
		Short:   "Show and drive Nodewright: cluster status, volume migrations, bond-mode flips, replication upgrades, OS upgrades, boots, VM snapshots, approvals, events, audit trail, profiles",
		Long:    rootHelp,
		Example: rootExamples,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl nodewright",
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	f.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVar(&f.noColor, "no-color", false, "Never colour the output (it is coloured only on a terminal; $NO_COLOR also turns it off).")
	registerNamespaceCompletion(root, f)

	for _, build := range []func(*Factory) *cobra.Command{
		newStatusCommand,
		newMigrateCommand,
		newFlipCommand,
		newUpgradeCommand,
		newOSCommand,
		newBootCommand,
		newSnapshotCommand,
		newRequestCommand,
		newApproveCommand,
		newEventsCommand,
		newFleetCommand,
		newAuditCommand,
		newProfileCommand,
		newCompletionCommand,
	} {
		root.AddCommand(build(f))
	}
	wrapRunE(root)

	factoriesMu.Lock()
	factories[root] = f
	factoriesMu.Unlock()
	return root
}

// AddCommand adds the command that build makes to a root made by NewRootCommand, giving build
// the root's Factory (its connection, namespace and streams). An error the command returns
// exits with 1, unless it is an *ExitError or a UsageError, which keep their codes.
//
// A subcommand written elsewhere (the web UI, say) is added like this:
//
//	root := cli.NewRootCommand(streams)
//	cli.AddCommand(root, func(f *cli.Factory) *cobra.Command {
//		return &cobra.Command{Use: "ui", RunE: func(cmd *cobra.Command, _ []string) error {
//			cfg, err := f.RESTConfig()
//			...
//		}}
//	})
func AddCommand(root *cobra.Command, build func(*Factory) *cobra.Command) {
	factoriesMu.Lock()
	f, ok := factories[root]
	factoriesMu.Unlock()
	if !ok {
		panic("cli.AddCommand: the root was not made by cli.NewRootCommand")
	}
	cmd := build(f)
	wrapRunE(cmd)
	root.AddCommand(cmd)
}

// wrapRunE marks every error a command's RunE returns as a failure (exit code 1), unless it
// already carries a code. Errors cobra raises itself (flags, arguments, unknown commands) stay
// unmarked and so are usage errors (exit code 2).
func wrapRunE(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil && cmd.Annotations[annotationWrapped] == "" {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			return asFailure(run(c, args))
		}
		if cmd.Annotations == nil {
			cmd.Annotations = map[string]string{}
		}
		cmd.Annotations[annotationWrapped] = "true"
	}
	for _, sub := range cmd.Commands() {
		wrapRunE(sub)
	}
}

const annotationWrapped = "nodewright.spectrocloud.com/exit-codes"

// Execute runs the command line args against a new root writing to streams, prints the error
// if there is one, and returns the exit code.
func Execute(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	root := NewRootCommand(streams)
	return Run(ctx, root, args)
}

// Run executes root (from NewRootCommand, with any commands added) with args, prints the error
// if there is one, and returns the exit code.
func Run(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	var exit *ExitError
	if errors.As(err, &exit) && exit.Silent {
		return code
	}
	fmt.Fprintf(root.ErrOrStderr(), "Error: %s\n", err)
	if code == ExitUsage && cmd != nil {
		fmt.Fprintf(root.ErrOrStderr(), "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// exactArgs wants n positional arguments, named in the message.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s wants %s, got %d arguments", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}
